"""`dwatt train`: one run (few-shot NER, text classification or masked LM); with no arguments the embedded
offline default: DWAtt in the FE setting on 16 x 4 sentences of the vendored CoNLL-2003 copy with the MiniLM backbone
from PyPI, 25 epochs, and the best dev F1."""

from __future__ import annotations

import argparse
from dataclasses import fields

from specs_dwatt import FUSIONS, POOLINGS

from ..run_config import CACHE_DTYPES, MODES, SAMPLINGS, RunConfig, default_learning_rate
from ..tasks import TASKS
from .options import (
    add_backbone_dtype_argument,
    add_column_arguments,
    add_max_memory_argument,
    add_threads_argument,
    add_through_final_norm_argument,
    add_word_readout_argument,
    csv_of,
)


def register(commands) -> None:
    parser = commands.add_parser(
        "train", help="one few-shot NER (or masked-LM) run; offline default with no arguments"
    )
    add_arguments(parser)
    add_threads_argument(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = RunConfig()
    parser.add_argument(
        "--backbone",
        default=None,
        help="Hub id or folder of the backbone, an encoder or a decoder LLM (default: MiniLM from PyPI)",
    )
    parser.add_argument(
        "--task",
        default=defaults.task,
        choices=tuple(TASKS),
        help="ner; mlm (needs --data-dir of WikiText-2); cls: text classification (default data: AG News)",
    )
    parser.add_argument(
        "--fusion",
        default=defaults.fusion,
        metavar="FUSION",
        help=f"the layer fusion: {', '.join(FUSIONS)} (default: %(default)s)",
    )
    parser.add_argument(
        "--mode",
        default=defaults.mode,
        choices=MODES,
        help="fe: frozen backbone; ft: all trains; lora: low-rank adapters on the frozen backbone",
    )
    parser.add_argument("--lora-rank", type=int, default=defaults.lora_rank, help="lora: the adapters' rank")
    parser.add_argument(
        "--lora-alpha", type=float, default=None, help="lora: the update's scale is alpha / rank (default: 2 x rank)"
    )
    parser.add_argument(
        "--lora-dropout", type=float, default=defaults.lora_dropout, help="lora: dropout on the adapters' input"
    )
    parser.add_argument(
        "--lora-targets",
        type=csv_of(str),
        default=None,
        help="lora: the backbone layers to adapt, comma-separated (default: the family's attention projections)",
    )
    parser.add_argument(
        "--dataset",
        default=None,
        help="ner: conll2003 (default) or wikiann:<lang>; cls: ag_news (default), a Hub dataset (name or name:config) or a folder",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="folder of your own files, named after it (ner: CoNLL columns or JSON lines, any tag set; cls: "
        "CSV/TSV/JSONL; default: the vendored CoNLL-03)",
    )
    parser.add_argument(
        "--n-shot",
        type=int,
        default=defaults.n_shot,
        help="N: N x C sentences are sampled (cls: N examples per class; 0: all)",
    )
    parser.add_argument(
        "--pooling",
        default=None,
        choices=POOLINGS,
        help="cls: mean over the tokens, the first or the last token (default: last on a decoder LLM, else mean)",
    )
    parser.add_argument(
        "--layers",
        default=defaults.layers,
        help="the layers the fusion mixes: all (default), every:k, a range a-b, or a list 3,7,12 (the last "
        "besides; only:a-b: those alone, the backbone cut below them); with --fusion base, one layer k: "
        "the head reads layer k alone",
    )
    add_column_arguments(parser)
    parser.add_argument("--sampling", default=defaults.sampling, choices=SAMPLINGS, help="sentences: exactly --n-shot")
    parser.add_argument("--dev-sentences", type=int, default=None, help="score a fixed random subset of the dev split")
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--seed", type=int, default=defaults.seed, help="fixes both the sample and the initialisation")
    parser.add_argument("--batch-size", type=int, default=None, help="default: 16 for ner, 8 for mlm")
    parser.add_argument("--block-size", type=int, default=defaults.block_size, help="mlm: tokens per block")
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        dest="learning_rate",
        help="peak learning rate (default for fe: "
        + ", ".join(f"{task.fe_learning_rate:g} for {name}" for name, task in TASKS.items())
        + ", as the fair comparisons chose; "
        f"the paper's {defaults.learning_rate:g} for lora and ft)",
    )
    parser.add_argument("--no-cache", action="store_false", dest="use_cache", help="FE without the feature cache")
    parser.add_argument("--cache-dtype", default=defaults.cache_dtype, choices=CACHE_DTYPES)
    add_max_memory_argument(parser)
    add_backbone_dtype_argument(parser)
    add_through_final_norm_argument(parser)
    add_word_readout_argument(parser)
    parser.add_argument("--output-dir", default=defaults.output_dir)
    parser.add_argument("--no-save", action="store_false", dest="save_model", help="do not write the checkpoint")
    parser.add_argument("--test", action="store_true", dest="evaluate_test", help="also score the best model on test")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument(
        "--quiet",
        action="store_const",
        const="quiet",
        dest="verbosity",
        default="normal",
        help="print the final line only",
    )
    shown.add_argument(
        "--verbose",
        action="store_const",
        const="verbose",
        dest="verbosity",
        help="the Trainer's own progress bars and logs, then the summary",
    )
    parser.add_argument(
        "--checkpoint-every-epoch", action="store_true", help="keep a Trainer checkpoint to resume from"
    )
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output-dir")
    parser.add_argument(
        "--deterministic", action="store_true", help="deterministic GPU kernels (slower; see SECURITY.md)"
    )


def run(args: argparse.Namespace) -> int:
    from ..console import headline, summary
    from ..distributed import is_main_process
    from ..training import run as run_training

    names = {f.name for f in fields(RunConfig)}
    config = RunConfig(**{k: v for k, v in vars(args).items() if k in names})
    if config.learning_rate is None:
        config.learning_rate = default_learning_rate(config.mode, config.task)
    config.lora_targets = list(config.lora_targets) if config.lora_targets else None
    config.progress, config.verbose = args.verbosity != "quiet", args.verbosity == "verbose"
    if config.n_shot == 0 or not TASKS[config.task].few_shot:
        config.n_shot = None
    results = run_training(config)
    if not is_main_process():  # under torchrun/accelerate launch, one summary for the run
        return 0
    if args.verbosity == "quiet":
        print(headline(results))
    else:
        print("\n".join(summary(results)))
    return 0
