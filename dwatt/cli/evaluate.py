"""`dwatt evaluate`: a trained checkpoint (or its ONNX export) scored on one split, by its task's scorer
(`scorer`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..atomic import read_json
from ..serving.prediction import BATCH_SIZE
from ..tasks import task_named
from .options import (
    COLUMNS,
    add_column_arguments,
    add_inference_arguments,
    add_threads_argument,
    columns_of,
    inference_model,
    positive_batch_size,
)


def register(commands) -> None:
    parser = commands.add_parser(
        "evaluate", help="score a trained checkpoint on a split (entity F1, accuracy or perplexity)"
    )
    parser.add_argument("checkpoint")
    parser.add_argument(
        "--dataset",
        default=None,
        help="default: the data the checkpoint was trained on (its run's results.json beside it), else conll2003 for "
        "NER, ag_news for text classification",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="folder of your own files (ner: CoNLL columns or JSON lines; cls: CSV/TSV/JSONL)",
    )
    add_column_arguments(parser)
    parser.add_argument("--split", default="validation")
    parser.add_argument("--block-size", type=int, default=128, help="mlm: tokens per block, as in training")
    parser.add_argument("--seed", type=int, default=0, help="mlm: the run's seed, which fixed its dev and test masks")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="rows per batch, sorted by length")
    add_inference_arguments(parser)
    add_threads_argument(parser)
    parser.set_defaults(handler=run)


def scorer(task: str):
    """The function that scores a checkpoint of `task` on a split: the command's own mapping of tasks (the masked LM's
    is in `dwatt.training.mlm`, which owns its masking)."""
    from ..serving.evaluation import score_classifier, score_tagger
    from ..training.mlm import score_checkpoint

    scorers = {"tagging": score_tagger, "masked_lm": score_checkpoint, "classification": score_classifier}
    return scorers[task_named(task).kind]


def trained_on(checkpoint: str) -> dict:
    """The data a checkpoint was trained on, where its run's results.json sits beside it (`<run>/model` beside
    `<run>/results.json`, as `dwatt train` and the probe's chosen head keep them): its dataset, data folder and
    columns; nothing for a checkpoint without one (a Hub id, a folder copied alone)."""
    results = Path(checkpoint).parent / "results.json"
    if not Path(checkpoint).is_dir() or not results.is_file():
        return {}
    config = read_json(results).get("config", {})
    return {key: config.get(key) for key in ("dataset", "data_dir", *COLUMNS) if config.get(key) is not None}


def with_trained_data(args: argparse.Namespace) -> None:
    """Where no data is given, the data the checkpoint was trained on (`trained_on`), said on stderr; a data folder
    recorded where this machine has none is refused with the option to give."""
    if args.dataset is not None or args.data_dir is not None:
        return
    data = trained_on(args.checkpoint)
    if data.get("data_dir") and not Path(data["data_dir"]).is_dir():
        raise ValueError(
            f"{args.checkpoint}: trained on the data folder {data['data_dir']!r}, which is not here: give --data-dir"
        )
    for key, value in data.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if data:
        named = data.get("data_dir") or data.get("dataset")
        print(f"dwatt evaluate: the data the checkpoint was trained on: {named} (its results.json)", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    positive_batch_size(args)
    with_trained_data(args)
    model, tokenizer, task = inference_model(args)
    score = scorer(task)
    scores = score(
        model,
        tokenizer,
        dataset=args.dataset,
        data_dir=args.data_dir,
        split=args.split,
        batch_size=args.batch_size,
        block_size=args.block_size,
        seed=args.seed,
        **columns_of(args),
    )
    print(json.dumps({"checkpoint": args.checkpoint, **scores}, indent=2))
    return 0
