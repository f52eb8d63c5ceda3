"""`dwatt rank-report`: how often each label-free measure of `dwatt rank-layers` picks the layer a labelled dev set
picks, from the fair grids' result stores (`dwatt.experiment.label_free`); needs the report extra."""

from __future__ import annotations

import argparse

from .report import report_module


def register(commands) -> None:
    parser = commands.add_parser(
        "rank-report",
        help="tables: how far the layers rank-layers picks agree with the probe's dev choice (from result stores)",
    )
    parser.add_argument("results", nargs="+", help="results.jsonl stores of probes (fair grids: every layer, tested)")
    parser.add_argument(
        "--rankings",
        nargs="+",
        required=True,
        metavar="FOLDER",
        help="folders holding rank_layers.json files (searched below), one per backbone and dataset",
    )
    parser.add_argument(
        "--output", required=True, help="folder for label_free.md and tables/ (each table as Markdown and CSV)"
    )
    parser.add_argument("--prefer", nargs="+", default=(), metavar="STORE", help="as for dwatt report")
    parser.add_argument(
        "--prune",
        metavar="BACKBONE",
        help="also measure the probe restricted to each measure's top-k layers on this backbone (its name as the "
        "stores give it)",
    )
    parser.add_argument(
        "--budget",
        nargs="+",
        default=None,
        metavar="STORE",
        help="stores of probes that also chose on a few-shot dev sample, for the label budget (default: the results)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    report_module("rank-report")  # the extra's one-line message where pandas, scipy or matplotlib is missing
    from ..experiment.label_free import write_label_free_report

    path = write_label_free_report(args.results, args.rankings, args.output, args.prefer, args.prune, args.budget)
    print(f"report: {path}")
    return 0
