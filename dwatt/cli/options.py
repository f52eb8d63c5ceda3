"""What several commands share: comma-separated values, `--threads`, `--train-in-parts`, and the model `predict` and `evaluate` run
(a checkpoint in PyTorch, or an ONNX export in onnxruntime, int8 with `--quantize int8`)."""

from __future__ import annotations

import argparse
import math
import re

from specs_dwatt import WORD_READOUTS

from ..run_config import BACKBONE_DTYPES, DEVICE_MAPS
from ..serving.schemes import QUANTIZATIONS, RUNTIMES
from ..tasks import TASKS


def csv_of(kind):
    """An argparse type: `a,b,c` as a tuple of `kind`, empty items skipped."""
    return lambda text: tuple(kind(item) for item in text.split(",") if item)


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for the model's kernels (default: the cores no other process keeps busy, at "
        "least one; OMP_NUM_THREADS, where set)",
    )


def add_train_in_parts_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--train-in-parts",
        type=int,
        default=None,
        dest="train_in_parts",
        metavar="K",
        help="the heads of a group that trains together (a probe's layers and rates, a fusion's "
        "rates) train K at a time, each kept as it ends: a run stopped in a long group resumes "
        "after its last finished part (default: all at once, or as many as --max-memory leaves "
        "room for)",
    )


SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "kib": 2**10,
    "m": 10**6,
    "mb": 10**6,
    "mib": 2**20,
    "g": 10**9,
    "gb": 10**9,
    "gib": 2**30,
    "t": 10**12,
    "tb": 10**12,
    "tib": 2**40,
}


def parse_size(text: str) -> int:
    """A memory size as people write it: `8GiB`, `8G`, `512MiB`, `1.5GB`, or bytes."""
    found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = found and found.group(2).lower()
    if not found or unit not in SIZE_UNITS or float(found.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"expected a size such as 8GiB, 512MiB or 8G, got {text!r}")
    return int(float(found.group(1)) * SIZE_UNITS[unit])


def add_budget_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """`--max-memory SIZE` (`parse_size`), bytes in `max_memory`; `what`: what the command does with it."""
    parser.add_argument(
        "--max-memory",
        type=parse_size,
        default=None,
        dest="max_memory",
        metavar="SIZE",
        help=f"the memory this command may take, such as 8GiB: {what}",
    )


def add_max_memory_argument(parser: argparse.ArgumentParser) -> None:
    add_budget_argument(
        parser,
        "feature caches that do not fit beside the model are memory-mapped from files (kept beside the output folder, "
        "named by their contents; a stopped build resumes); default: half the available memory for the caches",
    )
    parser.add_argument(
        "--cache-on-disk",
        action="store_true",
        dest="cache_on_disk",
        help="keep every feature cache in files (memory-mapped), however small: a stopped build "
        "resumes and a later run reads it instead of running the backbone again",
    )
    parser.add_argument(
        "--device-map",
        choices=DEVICE_MAPS,
        default=None,
        dest="device_map",
        help="FE: spread a backbone larger than one device over the devices there are, layer by layer "
        "(accelerate's device_map), the rest (and on the CPU, beyond --max-memory) read from disk "
        "as it runs; it computes the feature cache once; the checkpoint is head-only",
    )


def add_backbone_dtype_argument(parser: argparse.ArgumentParser, serving: bool = False) -> None:
    what = (
        "runs in (PyTorch; default auto: as the checkpoint holds it); the fusion and head keep theirs"
        if serving
        else "loads and runs in (default auto: as saved, bf16 for most LLM checkpoints; FT: float32); the fusion "
        "and head train in float32"
    )
    parser.add_argument(
        "--backbone-dtype",
        choices=BACKBONE_DTYPES,
        default="auto",
        dest="backbone_dtype",
        help=f"the dtype the backbone {what}",
    )


def add_through_final_norm_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--through-final-norm",
        action="store_true",
        dest="through_final_norm",
        help="read every layer through the norm the backbone applies after its last one (decoder LLMs): a head on "
        "one layer then exports as the family's stock tagger, or text classifier, whose head it then is (the last "
        "token, one linear map without a bias; dwatt export --format transformers)",
    )


def add_word_readout_argument(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """`--word-readout` (`--word-readouts` for a grid: each run with each): which vector of each word a tagger reads."""
    what = (
        "first: the word's first sub-token (BERT's convention; what a stock tagger exports); last: its last sub-token "
        "(in a causal decoder the first that has seen the whole word); mean: the mean over its sub-tokens; "
        "echo-last, echo-mean: the sentence given twice, the word read in the second copy, where a causal decoder "
        "has seen the whole sentence (twice the tokens)"
    )
    if several:
        parser.add_argument(
            "--word-readouts",
            type=csv_of(str),
            default=None,
            dest="word_readouts",
            help=f"tagging: each run with each of these ({', '.join(WORD_READOUTS)}); {what}",
        )
        return
    parser.add_argument(
        "--word-readout",
        choices=WORD_READOUTS,
        default="first",
        dest="word_readout",
        help=f"tagging: which vector of each word the head reads (default first); {what}",
    )


COLUMNS = ("text_column", "pair_column", "label_column")


def add_backbone_and_task_arguments(parser: argparse.ArgumentParser, task_help: str) -> None:
    """`--backbone` and `--task` (a task whose head predicts its data's labels) of the commands that read layers."""
    parser.add_argument("--backbone", default=None, help="Hub id or folder (default: the packaged MiniLM)")
    parser.add_argument(
        "--task",
        default="ner",
        choices=tuple(name for name, task in TASKS.items() if task.labelled),
        help=task_help,
    )


def add_column_arguments(parser: argparse.ArgumentParser) -> None:
    """The columns of a text-classification folder's CSV/TSV/JSONL files, read the same way in every split."""
    parser.add_argument(
        "--text-column", default=None, help="cls: the text column of CSV/TSV/JSONL files (default: detected)"
    )
    parser.add_argument(
        "--pair-column", default=None, help="cls: a second text column, for sentence pairs (default: detected)"
    )
    parser.add_argument("--label-column", default=None, help="cls: the label column (default: detected)")


def columns_of(args: argparse.Namespace) -> dict:
    return {key: getattr(args, key) for key in COLUMNS}


def check_grid_arguments(args: argparse.Namespace) -> None:
    """`--learning-rates` and `--train-in-parts` as the user wrote them, refused by their option's name (a rate
    checked later would be named `--lr`, a count `train_in_parts`)."""

    for rate in getattr(args, "learning_rates", None) or ():
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"--learning-rates: every rate must be a finite number > 0, got {rate:g}")
    parts = getattr(args, "train_in_parts", None)
    if parts is not None and parts < 1:
        raise ValueError(f"--train-in-parts must be >= 1 (heads trained at a time), got {parts}")


def add_inference_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        default=None,
        help="int8: dynamic int8 linear maps in the backbone and fusion (CPU; an encoder's: a "
        "decoder LLM's checkpoint is refused, its export keeps the tags); on an ONNX export, "
        "the export's int8 graph (not with --heads, which runs fp32)",
    )
    add_backbone_dtype_argument(parser, serving=True)
    parser.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default=None,
        help="torch: a checkpoint in PyTorch; onnx: a `dwatt export` folder in onnxruntime, without "
        "importing torch (default: the one the folder was written for)",
    )


def positive_batch_size(args: argparse.Namespace) -> None:
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")


def runtime(args: argparse.Namespace) -> str:
    """The runtime the folder was written for (onnx for a `dwatt export` folder, else torch); a `--runtime` that
    names the other one is refused."""
    from ..serving.onnx_runtime import is_export

    written_for = "onnx" if is_export(args.checkpoint) else "torch"
    if args.runtime == "onnx" and written_for == "torch":
        raise ValueError(f"--runtime onnx: {args.checkpoint} is not an ONNX export; write one with `dwatt export`")
    if args.runtime == "torch" and written_for == "onnx":
        raise ValueError(
            f"--runtime torch: {args.checkpoint} is an ONNX export; run its checkpoint in PyTorch, "
            "or this folder without --runtime"
        )
    return written_for


def inference_model(args: argparse.Namespace):
    """The model `predict` and `evaluate` run, its tokenizer and task: a checkpoint or a probe ensemble's folder in
    PyTorch (int8 with `--quantize int8`), or an ONNX export in onnxruntime (its int8 graph with `--quantize int8`)."""
    dtype = getattr(args, "backbone_dtype", "auto")
    if runtime(args) == "onnx":
        from ..serving.onnx_runtime import load_export

        if dtype != "auto":
            raise ValueError(f"--backbone-dtype {dtype}: an ONNX export runs in the dtype it was written in")
        return load_export(args.checkpoint, args.quantize)
    from ..serving.ensemble import load_checkpoint_or_ensemble
    from ..serving.quantization import quantize, with_backbone_dtype

    if dtype != "auto" and args.quantize:
        raise ValueError(
            f"--backbone-dtype {dtype} with --quantize {args.quantize}: int8 replaces the backbone's "
            "float weights; give one of them"
        )
    model, tokenizer, task = load_checkpoint_or_ensemble(args.checkpoint)
    return quantize(with_backbone_dtype(model, dtype), args.quantize), tokenizer, task
