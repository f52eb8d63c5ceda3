"""`dwatt report`: tables (mean ± 95% CI) and figures from results stores (`dwatt.experiment.report`), which need
the report extra (pandas, matplotlib, scipy)."""

from __future__ import annotations

import argparse
import importlib

REPORT_EXTRA = ("pandas", "matplotlib", "scipy")


def register(commands) -> None:
    parser = commands.add_parser("report", help="tables (mean ± 95%% CI) and figures from results files")
    parser.add_argument("results", nargs="+", help="results.jsonl stores of `dwatt sweep` and/or results.json files")
    parser.add_argument("--output", required=True, help="folder for report.md, tables/ and figures/")
    parser.add_argument("--title", default="Results")
    parser.add_argument(
        "--prefer",
        nargs="+",
        default=(),
        metavar="STORE",
        help="where a run is held twice with different results (a run trained again: float noise), "
        "take the row of these stores (among the results), or of STORE:LINE for two rows of one "
        "store, instead of refusing the report",
    )
    parser.add_argument(
        "--floor",
        metavar="FILE",
        help="add the floor to a fair grid's tables: the majority label and a model with no backbone (a CRF on word "
        "features, or TF-IDF and logistic regression) on every sample the runs trained on, paired by trial; their "
        "scores are kept in FILE, and the samples it lacks are scored first (minutes each; the baselines extra)",
    )
    parser.set_defaults(handler=run)


def report_module(command: str):
    """`dwatt.experiment.report`, or a one-line error naming the extra that brings what it needs."""
    try:
        return importlib.import_module("dwatt.experiment.report")
    except ModuleNotFoundError as error:
        if error.name not in REPORT_EXTRA:
            raise
        raise ValueError(
            f'dwatt {command} needs {error.name} for its tables and figures: pip install "dwatt[report]"'
        ) from None


def run(args: argparse.Namespace) -> int:
    print(
        f"report: {report_module('report').write_report(args.results, args.output, args.title, args.prefer, args.floor)}"
    )
    return 0
