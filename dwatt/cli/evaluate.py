"""`dwatt evaluate`: a trained checkpoint (or its ONNX export) scored on one split, by its task's scorer
(`scorer`)."""

from __future__ import annotations

import argparse
import json

from ..serving.prediction import BATCH_SIZE
from ..tasks import task_named
from .options import (
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
    parser.add_argument("--dataset", default=None, help="default: conll2003 for NER, ag_news for text classification")
    parser.add_argument("--data-dir", default=None, help="folder of the dataset's files (cls: CSV/TSV/JSONL)")
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


def run(args: argparse.Namespace) -> int:
    positive_batch_size(args)
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
