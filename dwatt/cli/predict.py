"""`dwatt predict`: tags (NER), labels (text classification) or mask fills (masked LM) of every input line, one
record per line in input order, written as each chunk of batches finishes (`dwatt.serving.lines`); with `--heads`,
every head's tags from one backbone pass."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from tqdm.auto import tqdm

from ..serving.lines import LINE_PREDICTORS, HeadsWriter, InputLines, write_all
from ..serving.prediction import BATCH_SIZE, CHUNK_BATCHES
from ..tasks import kind_of_model, task_named
from .options import add_inference_arguments, add_threads_argument, inference_model, positive_batch_size

PROGRESS_FROM = 300  # a bar for files of more lines than this


def register(commands) -> None:
    parser = commands.add_parser(
        "predict", help="tag sentences (NER), fill [MASK]s (masked LM) or classify texts with a trained checkpoint"
    )
    parser.add_argument("checkpoint", nargs="?", default=None, help="omit with --heads")
    parser.add_argument("sentences", nargs="*")
    parser.add_argument(
        "--file", help="one sentence per line; writes one output line per input line (a blank one: empty)"
    )
    parser.add_argument(
        "--heads",
        default=None,
        help="checkpoints sharing one backbone, comma-separated with no space (A,B): every head's tags "
        "from one backbone pass (fp32: not with --quantize or --runtime)",
    )
    parser.add_argument("--tokenizer", default=None, help="--heads: where the tokenizer is (default: the first head)")
    parser.add_argument(
        "--jsonl",
        nargs="?",
        const="-",
        default=None,
        metavar="FILE",
        help="read one sentence per line from FILE (default: stdin) and write one JSON object per input line, "
        "with its line number (a blank line: a record with empty fields)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=BATCH_SIZE,
        help="rows (windows, texts) per batch, sorted by length (default: %(default)s, the fastest measured)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    add_inference_arguments(parser)
    add_threads_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    positive_batch_size(args)
    sentences = list(args.sentences)
    if args.heads and args.checkpoint is not None:  # no checkpoint argument with --heads: it is the first sentence
        sentences.insert(0, args.checkpoint)
    if args.heads:
        folders = [text for text in sentences if (Path(text) / "config.json").is_file()]
        if folders:  # `--heads A B "..."`: B is a checkpoint, not a sentence to tag
            raise ValueError(
                f"--heads takes the checkpoints comma-separated, with no space: --heads {args.heads},{','.join(folders)} "
                f"(here {folders[0]} would be tagged as a sentence)"
            )
    lines = InputLines(sentences, [source for source in (args.file, args.jsonl) if source is not None])
    if not sentences and not lines.sources:
        raise ValueError("give sentences as arguments, with --file, or with --jsonl")
    if args.heads:
        if args.quantize or args.runtime:
            raise ValueError("--heads runs the shared backbone in PyTorch fp32: leave out --quantize and --runtime")
        predict_heads(args, with_progress(lines, args.quiet))
        return finish(lines)
    if args.checkpoint is None:
        raise ValueError("give a checkpoint, or several with --heads")
    model, tokenizer, task = inference_model(args)
    predict, writer = LINE_PREDICTORS[task_named(task).kind](model, tokenizer, args.batch_size, output_form(args))
    write_all(with_progress(lines, args.quiet), args.batch_size * CHUNK_BATCHES, predict, writer)
    return finish(lines)


def output_form(args: argparse.Namespace) -> str:
    """JSON records with `--jsonl`, a line per input line with `--file`, readable blocks for arguments alone."""
    return "json" if args.jsonl is not None else "line" if args.file is not None else "block"


def with_progress(lines: InputLines, quiet: bool) -> Iterable[tuple[int, str]]:
    """A bar on stderr for inputs of more than `PROGRESS_FROM` lines from files; stdout stays clean."""
    total = None if quiet else lines.total()
    if total is None or total <= PROGRESS_FROM:
        return lines

    return tqdm(lines, total=total, desc="predicting", unit="line", file=sys.stderr, leave=False)


def predict_heads(args: argparse.Namespace, lines: Iterable[tuple[int, str]]) -> None:
    """`dwatt predict --heads a,b,...`: every head's tags from one backbone pass per batch."""
    from ..serving.prediction import as_array, run_on_arrays, tag, word_readout_of
    from ..serving.shared_heads import SharedBackboneHeads
    from ..tokenization import load_tokenizer

    paths = [path for path in args.heads.split(",") if path]
    heads = SharedBackboneHeads.from_pretrained(paths)
    taggers = {name: head for name, head in heads.heads.items() if kind_of_model(head) == "tagging"}
    if not taggers:
        raise ValueError("--heads: none of the checkpoints is a token-classification head")
    tokenizer = load_tokenizer(args.tokenizer or paths[0])
    embeddings = heads.backbone.get_input_embeddings().num_embeddings
    if len(tokenizer) > embeddings:  # its ids past the backbone's vocabulary would index nothing
        raise ValueError(
            f"{'--tokenizer ' + args.tokenizer if args.tokenizer else paths[0]}: the tokenizer has "
            f"{len(tokenizer)} tokens, the shared backbone {embeddings} embeddings: not this backbone's tokenizer"
        )
    id2labels = {name: head.config.id2label for name, head in taggers.items()}
    readout = word_readout_of(next(iter(taggers.values())).config)  # one for all: they share the backbone's input

    def run_logits(batch):
        outputs = run_on_arrays(heads, batch)
        return {name: as_array(output.logits) for name, output in outputs.items() if name in taggers}

    def predict(texts: list[str]) -> list:
        sentences = [text.split() for text in texts]
        tags = tag(run_logits, id2labels, tokenizer, sentences, args.batch_size, readout=readout)
        return [(words, {name: tags[name][index] for name in taggers}) for index, words in enumerate(sentences)]

    write_all(lines, args.batch_size * CHUNK_BATCHES, predict, HeadsWriter(output_form(args), list(taggers)))


def finish(lines: InputLines) -> int:
    if not lines.read:
        raise ValueError("nothing to predict: give sentences as arguments, with --file, or with --jsonl")
    if lines.blank:
        print(f"dwatt predict: {lines.blank} blank lines, each given an empty record", file=sys.stderr)
    return 0
