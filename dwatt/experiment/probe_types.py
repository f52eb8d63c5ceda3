"""What `dwatt probe` is asked (`ProbeSettings`) and what it found (`ProbeOutcome`), and the small questions both
answer (`spec_at`, `layer_span`): the data types the probe's modules share, importing none of them."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ..fingerprints import backbone_fingerprint, data_fingerprint
from ..portable import backbone_label, portable_path
from ..run_config import check_backbone_folder, check_word_readout
from ..tasks import TASKS
from .widening import Widening, edge_of

PROBE_LEARNING_RATES = (3e-4, 1e-3, 3e-3, 1e-2)
# Where a probe given neither --output nor --results keeps its figure, its chosen model and its questions' stores.
PROBE_FOLDER = "runs/probe"


def metrics() -> dict[str, tuple[str, str, str]]:
    """What a probe scores on dev and test, by task: the run's own selection metric, from the tasks' records (the
    results' key of the best dev score, the test score's key and the metric's name)."""
    return {
        name: (f"best_dev_{task.score}", task.score, task.score_name) for name, task in TASKS.items() if task.labelled
    }


@dataclass
class ProbeSettings:
    """What `dwatt probe` is asked: the data and backbone as `dwatt train` takes them, the layers and rates to
    try, how many trials, whether to score test, and where the rows, the figure and the chosen model go."""

    backbone: str | None = None
    task: str = "ner"
    dataset: str | None = None
    data_dir: str | None = None
    n_shot: int = 32
    epochs: int = 25
    trials: int = 1
    layers: str = "all"
    learning_rates: tuple[float, ...] = PROBE_LEARNING_RATES
    widen: int = 3  # rates added past each edge where a layer's best rate sits there (`Widening`); 0: the grid asked
    dev_sentences: int | None = None
    pooling: str | None = None
    text_column: str | None = None
    pair_column: str | None = None
    label_column: str | None = None
    cache_dtype: str = "float16"
    backbone_dtype: str = "auto"  # `RunConfig.backbone_dtype`
    max_memory: int | None = None  # bytes the probe may take (`RunConfig.max_memory`)
    device_map: str | None = None  # the backbone spread over devices (`RunConfig.device_map`)
    cache_on_disk: bool = False  # `RunConfig.cache_on_disk`
    through_final_norm: bool = False  # every layer read through the backbone's final norm (`RunConfig`'s)
    word_readout: str = "first"  # which vector of each word a tagging head reads (`RunConfig`'s)
    test: bool = False
    results: str | None = None  # a store shared on purpose; None: the question's own (`store`)
    output_root: str | None = None
    output: str | None = None
    save_model: bool = True
    # the floor and controls: the majority label and a model with no backbone scored on each trial's sample, the
    # embedding output (layer 0) probed as a layer, the chosen head trained on shuffled labels
    baselines: bool = True
    save_ensemble: int | None = None  # also save the heads of this many best layers, averaged, as one model
    train_in_parts: int | None = None  # the heads of a trial train this many at a time, each kept as it ends
    progress: bool = True

    def __post_init__(self) -> None:
        check_backbone_folder(self.backbone)
        if self.task not in metrics():
            names = list(metrics())
            listed = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
            raise ValueError(f"--task: a probe trains heads for {listed}, not {self.task!r}")
        if self.save_ensemble is not None and self.save_ensemble < 2:
            raise ValueError(
                f"--save-ensemble: an ensemble averages at least 2 layers' heads, not {self.save_ensemble}"
            )
        if self.widen < 0:
            raise ValueError(f"--widen: a count of rates to add past each edge (0 or more), not {self.widen}")
        if self.save_ensemble is not None and not self.save_model:
            raise ValueError("--save-ensemble saves a model: leave out --no-save")
        check_word_readout(self.word_readout, self.task)
        if not TASKS[self.task].pools and any((self.pooling, self.text_column, self.pair_column, self.label_column)):
            raise ValueError("--pooling and the --*-column options are for text classification: add --task cls")

    @property
    def folder(self) -> Path:
        """Where the figure and the chosen model go: `output`, else beside a store given, else `PROBE_FOLDER`."""
        if self.output:
            return Path(self.output)
        return Path(self.results).parent if self.results else Path(PROBE_FOLDER)

    @property
    def store(self) -> Path:
        """The probe's results store: `results` where given (a store shared on purpose), else the question's own,
        `<folder>/questions/<question_name>/results.jsonl`, its runs' folders beside it: two probes of other data,
        backbone weights or settings never meet in one store, and a probe asked again resumes from its own."""
        if self.results:
            return Path(self.results)
        return self.folder / "questions" / self.question_name() / "results.jsonl"

    def question(self) -> dict:
        """What the probe asks, as a store tells its rows apart: the task, the data and the backbone by name and by
        content (`data_fingerprint`, `backbone_fingerprint`: a folder whose files changed is another question), and
        every setting that changes a run's numbers but not its id. The sample sizes, trials, layers and rates are not
        in it: a probe asked for more of them adds rows to the same store. A word readout other than the first
        sub-token's is named (a key that probes made before readouts existed lack)."""
        read = {"word_readout": self.word_readout} if self.word_readout != "first" else {}
        return read | {
            "task": self.task,
            "dataset": self.dataset,
            "data": portable_path(self.data_dir),
            "data_sha256": data_fingerprint(self.data_dir),
            "backbone": portable_path(self.backbone),
            "backbone_sha256": backbone_fingerprint(self.backbone),
            "test": self.test,
            "dev_sentences": self.dev_sentences,
            "cache_dtype": self.cache_dtype,
            "backbone_dtype": self.backbone_dtype,
            "through_final_norm": self.through_final_norm,
            "pooling": self.pooling,
            "columns": [self.text_column, self.pair_column, self.label_column],
        }

    def question_name(self) -> str:
        """The question's folder: the task, the data's and the backbone's names, and 10 hex digits of `question`."""
        data = Path(self.data_dir).name if self.data_dir else (self.dataset or TASKS[self.task].default_dataset)
        digest = hashlib.sha256(json.dumps(self.question(), sort_keys=True).encode()).hexdigest()[:10]
        name = f"{self.task}-{data}-{backbone_label(self.backbone)}-{digest}"
        return "".join(character if character.isalnum() or character in "-_." else "_" for character in name)

    def overrides(self) -> dict:
        """The `RunConfig` fields every run of the probe shares beyond its spec."""
        columns = {
            key: getattr(self, key) for key in ("text_column", "pair_column", "label_column") if getattr(self, key)
        }
        return {
            "cache_dtype": self.cache_dtype,
            "backbone_dtype": self.backbone_dtype,
            "max_memory": self.max_memory,
            "device_map": self.device_map,
            "cache_on_disk": self.cache_on_disk,
            **({"evaluate_test": True} if self.test else {}),
            **columns,
        }


@dataclass
class ProbeOutcome:
    """What a probe found: every run's scores by (trial, layer, rate), the choice, and where its files are."""

    task: str
    scores: dict[tuple[int, int, float], dict]  # (trial, layer, rate) -> {"dev": ..., "test": ...} (x 100)
    chosen: tuple[int, float]
    chosen_per_trial: dict[int, tuple[int, float]]
    dev_size: int | None
    depth: int | None = None  # the backbone's layer count, as the rows record it
    figure: Path | None = None
    model: Path | None = None
    saved: dict = field(default_factory=dict)
    stock_refusal: str | None = None  # why the saved head cannot export as a stock model (None: it can)
    kept: Path | None = None  # where a comparison of poolings copied this head, being its choice (`probe_poolings`)
    ensemble: Path | None = None  # the saved ensemble's folder (`save_ensemble`), its members in `ensemble_members`
    ensemble_members: list[tuple[int, float]] = field(default_factory=list)
    # the probe's ensembles (`dwatt.training.probe_ensembles`), where it scored test: size -> one per trial, each
    # {"layers": [...], "dev": ..., "test": ...} (x 100)
    ensembles: dict[int, list[dict]] = field(default_factory=dict)
    widening: Widening | None = None  # the rates the grid gained past its edges, and the limits it stopped at
    # the baselines' scores on each trial's sample, mean over the trials (`baselines.BaselineScores`)
    floor: list = field(default_factory=list)
    floor_missing: str = ""  # why no baseline was scored, where a package it needs is missing
    # the chosen head trained on each trial's sample with its labels shuffled: trial -> {"dev": ..., "test": ...}
    shuffled: dict[int, dict] = field(default_factory=dict)
    # labels of the evaluation splits that no training example of a trial carries (scored as errors):
    # label -> {trial: {split: rows}}
    unseen_labels: dict[str, dict[int, dict[str, int]]] = field(default_factory=dict)
    # the labels the heads predict, as the runs recorded them (a tagging task's tag set is stated from them)
    labels: list[str] | None = None

    def best_rate(self, layer: int) -> float:
        """The rate with `layer`'s best mean dev score (ties: the smaller rate)."""
        return max(self.rates, key=lambda rate: (_ordered(self.mean(layer, rate)), -rate))

    def edges(self) -> dict[str, list[int]]:
        """The layers whose best rate is an edge of the rates tried, by edge (`widening.edge_of`). A layer that scores
        the same at every rate (at chance, say) has no best rate, and is at no edge: no rate past one would change it."""
        at = {}
        for layer in self.layers:
            scored = [score for score in (self.mean(layer, rate) for rate in self.rates) if not math.isnan(score)]
            if len(scored) > 1 and max(scored) - min(scored) < 1e-9:
                continue
            edge = edge_of(self.best_rate(layer), self.rates)
            if edge:
                at.setdefault(edge, []).append(layer)
        return at

    @property
    def layers(self) -> list[int]:
        return sorted({layer for _, layer, _ in self.scores})

    @property
    def rates(self) -> list[float]:
        return sorted({rate for _, _, rate in self.scores})

    @property
    def trials(self) -> list[int]:
        return sorted({trial for trial, _, _ in self.scores})

    @property
    def metrics(self) -> tuple[str, str, str]:
        """The results' key of the best dev score, the test score's key and the metric's name (`metrics`)."""
        return metrics()[self.task]

    def depth_text(self) -> str:
        return str(self.depth) if self.depth is not None else "L"

    def mean(self, layer: int, rate: float, split: str = "dev") -> float:
        values = [
            self.scores[trial, layer, rate][split] for trial in self.trials if (trial, layer, rate) in self.scores
        ]
        values = [value for value in values if value is not None]
        return statistics.fmean(values) if values else math.nan


def _ordered(score: float) -> float:
    """A mean dev score as `max` ranks it: a layer never scored at a rate ranks last there."""
    return -math.inf if math.isnan(score) else score


def spec_at(specs, trial: int, layer: int, rate: float):
    """The probe's run of `trial` on `layer` at `rate`."""
    return next(
        spec for spec in specs if spec.trial == trial and (int(spec.layers), spec.learning_rate) == (layer, rate)
    )


def layer_span(layers: list[int]) -> str:
    """Layers as a span (`1-28`) where they run on without a gap, else as a list."""
    return (
        f"{layers[0]}-{layers[-1]}"
        if layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 2
        else ", ".join(map(str, layers))
    )


__all__ = ["PROBE_LEARNING_RATES", "ProbeOutcome", "ProbeSettings", "layer_span", "metrics", "spec_at"]
