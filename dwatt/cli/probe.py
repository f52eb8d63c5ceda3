"""`dwatt probe`: a Base head on each chosen layer at each learning rate (see `dwatt.experiment.probe`); prints the
dev score by layer and rate, the layer and rate chosen on dev (each trial's own choice too), and where the figure and
the model are."""

from __future__ import annotations

import argparse
import time
from dataclasses import fields

from specs_dwatt import POOLINGS

from ..experiment.probe import PROBE_LEARNING_RATES
from ..run_config import CACHE_DTYPES
from .options import (
    add_backbone_and_task_arguments,
    add_backbone_dtype_argument,
    add_column_arguments,
    add_max_memory_argument,
    add_threads_argument,
    add_through_final_norm_argument,
    add_train_in_parts_argument,
    add_word_readout_argument,
    check_grid_arguments,
    csv_of,
)


def register(commands) -> None:
    parser = commands.add_parser(
        "probe",
        help="a head on each layer at each learning rate: which layer reads best; "
        "saves the chosen head, cut at its layer",
    )
    add_backbone_and_task_arguments(parser, "ner, or cls: text classification")
    parser.add_argument(
        "--dataset",
        default=None,
        help="ner: conll2003 (default) or wikiann:<lang>; cls: ag_news (default), a Hub dataset or a folder",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="folder of your own files, named after it: ner: train, dev/valid/validation and test as CoNLL columns "
        "(.txt/.conll/.iob/.tsv) or JSON lines, any tag set; cls: CSV/TSV/JSONL",
    )
    parser.add_argument(
        "--n-shot", type=int, default=32, help="N: N x C sentences (cls: N examples per class; default 32)"
    )
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--trials", type=int, default=1, help="seeds 0..trials-1: each trial's choice is printed")
    parser.add_argument(
        "--layers",
        default="all",
        help="the layers to probe: all (1..L), every:k, a-b or a list; the embedding output (layer 0) is probed too "
        "unless --no-baselines",
    )
    parser.add_argument(
        "--pooling",
        default=None,
        choices=POOLINGS,
        help="text tasks: as for dwatt train (default on an encoder: both mean and first probed, each in "
        "<output>/pooling-<name>, the one better on dev copied to <output>/chosen; first exports stock)",
    )
    add_column_arguments(parser)
    # and 5e-5 never: the probe's grid spans 3e-4..1e-2.
    parser.add_argument(
        "--learning-rates",
        type=csv_of(float),
        default=PROBE_LEARNING_RATES,
        dest="learning_rates",
        help="comma-separated (default: %(default)s; the fair comparison's heads chose 3e-4..1e-2)",
    )
    parser.add_argument(
        "--widen",
        type=int,
        default=3,
        metavar="K",
        help="where a layer's best dev rate is an edge of the rates, train the next rate past it (the grid's own "
        "steps), up to K a side (default: %(default)s; 0: the rates as given)",
    )
    parser.add_argument("--dev-sentences", type=int, default=None, help="score a fixed random subset of the dev split")
    parser.add_argument("--cache-dtype", default="float16", choices=CACHE_DTYPES)
    add_max_memory_argument(parser)
    add_backbone_dtype_argument(parser)
    add_through_final_norm_argument(parser)
    add_word_readout_argument(parser)
    parser.add_argument("--test", action="store_true", help="also score every head's best epoch on the test split")
    parser.add_argument(
        "--results",
        default=None,
        help="the results store, to share one on purpose (default: the question's own, under <output>/questions/: a probe of other data, backbone weights or settings gets another, and one asked again resumes from its own)",
    )
    parser.add_argument("--output-root", default=None, help="per-run folders (default: runs/ beside the store)")
    parser.add_argument(
        "--output",
        default=None,
        help="where the figure (probe.png) and the chosen model (chosen/model) go (default: beside --results where given, else runs/probe)",
    )
    parser.add_argument(
        "--no-save",
        action="store_false",
        dest="save_model",
        help="do not save the chosen head (the table and the figure only)",
    )
    parser.add_argument(
        "--no-baselines",
        action="store_false",
        dest="baselines",
        help="do not score the majority label, a model with no backbone (CRF / TF-IDF), the embedding output "
        "(layer 0) and the chosen head on shuffled labels on each trial's sample",
    )
    parser.add_argument(
        "--save-ensemble",
        type=int,
        default=None,
        metavar="K",
        help="also save the K best layers' heads (each at its best rate on dev), their probabilities "
        "averaged, as one model in <output>/ensemble-K that dwatt predict and evaluate run "
        "(PyTorch fp32)",
    )
    add_train_in_parts_argument(parser)
    parser.add_argument("--quiet", action="store_true")
    add_threads_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..experiment.probe import ProbeSettings, run_probe, summary_lines, table_lines
    from ..experiment.probe_poolings import pooling_lines, run_pooling_probes

    check_grid_arguments(args)
    names = {f.name for f in fields(ProbeSettings)}
    settings = ProbeSettings(**{k: v for k, v in vars(args).items() if k in names}, progress=not args.quiet)
    from ..training import EXECUTION  # after the settings' checks, so that a probe refused for them imports no torch

    started = time.perf_counter()

    def report(pooling, outcome, asked) -> None:
        heading = [f"pooling {pooling}:"] if pooling and asked is not settings else []
        took = f"took {time.perf_counter() - started:.0f} s"
        print("\n".join([*heading, *table_lines(outcome), *summary_lines(outcome), f"rows in {asked.store}; {took}"]))

    outcomes = run_pooling_probes(settings, EXECUTION, run_probe, report)
    if len(outcomes) > 1:
        print("\n".join(pooling_lines(outcomes)))
    return 0
