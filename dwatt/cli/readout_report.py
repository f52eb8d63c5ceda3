"""`dwatt readout-report`: how each word readout of a tagger fares against the first sub-token's, from the stores of
probes that differ only in `--word-readout` (`dwatt.experiment.readouts`); needs the report extra."""

from __future__ import annotations

import argparse

from .report import report_module


def register(commands) -> None:
    parser = commands.add_parser(
        "readout-report",
        help="a table: each word readout's dev-chosen probe against the first sub-token's (from result stores)",
    )
    parser.add_argument("results", nargs="+", help="results.jsonl stores of probes (--test) with --word-readout")
    parser.add_argument("--output", required=True, help="folder for readouts.md and readouts.csv")
    parser.add_argument("--prefer", nargs="+", default=(), metavar="STORE", help="as for dwatt report")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    report_module("readout-report")  # the extra's one-line message where pandas, scipy or matplotlib is missing
    from ..experiment.readouts import write_readout_report

    print(f"report: {write_readout_report(args.results, args.output, args.prefer)}")
    return 0
