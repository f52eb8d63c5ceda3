"""Experiment grids: the cross product of runs (`RunSpec`, `grid`), the presets of the paper's figures, how a grid
is dealt into shards (`shard`: whole work units, one sample each), and which runs train together under which engine
(`batches_of_runs`).

Each run has a readable `run_id` (dataset, backbone, mode, fusion, N, budget, trial, and the options it sets); its
identity (everything that changes its numbers) is the store's business (`dwatt.experiment.store`).

Budgets: each epoch budget (25/50/75/100) is its own run, not a prefix of the longest one, because the linear decay
of the learning rate to 0 depends on the budget; a 25-epoch prefix of a 100-epoch run is a different schedule.
The runs of a trial that differ only in their budget still share their sample, initialisation, batch order and
dropout masks, so in the FE setting the sweep trains them together (`dwatt.stacked_heads`): one pass over the data, one
copy of the head per budget, each copy ending exactly as its budget would alone in that loop.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path

from specs_dwatt import fusion_spec

from ..defaults import default_backbone_path
from ..portable import backbone_folder, backbone_label
from ..run_config import RunConfig, check_word_readout
from ..tasks import TASKS, task_named

# How a sweep trains: "trainer" runs every spec through `transformers.Trainer`; "stacked" trains the runs of one FE
# sample (epoch budgets, learning rates, a probe's layers) together as stacked copies of one head
# (`dwatt.stacked_heads`); "auto" does the latter wherever a group has more than one run.
ENGINES = ("auto", "trainer", "stacked")
# The stacked engine's name before it was renamed, as older rows and scripts give it.
ENGINE_ALIASES = {"budgets": "stacked"}


def engine_named(name: str) -> str:
    """The engine `name` stands for (an old name read as the new one), or a clear error listing them."""
    engine = ENGINE_ALIASES.get(name, name)
    if engine not in ENGINES:
        raise ValueError(f"--engine: unknown engine {name!r}; expected one of {', '.join(ENGINES)}")
    return engine


# How far either side of the best single layer a window fusion reaches (`dwatt.experiment.selection.window_around`).
WINDOW_RADIUS = 2


@dataclass(frozen=True)
class RunSpec:
    """One run of a grid. `trial` is the seed: it fixes both the few-shot sample and the initialisation, so all
    fusions of a trial see the same sentences. `n_shot` is N (N x C sentences) with `sampling="uniform"`, the
    number of sentences with `sampling="sentences"`, N per class for text classification, and unused by the
    masked-LM task. `learning_rate` (default: the run's, the paper's 5e-5) and `pooling` (text classification)
    appear in the run id when set, as do a control's `shuffle_labels`, `through_final_norm` and a `word_readout` other
    than the first sub-token's."""

    fusion: str
    mode: str
    n_shot: int | None
    epochs: int
    trial: int
    dataset: str = "conll2003"
    backbone: str | None = None
    data_dir: str | None = None
    task: str = "ner"
    sampling: str = "uniform"
    dev_sentences: int | None = None
    learning_rate: float | None = None
    pooling: str | None = None
    layers: str | None = None
    shuffle_labels: bool = False  # a control trained on the sample's labels permuted (`RunConfig.shuffle_labels`)
    through_final_norm: bool = False  # the layers read through the backbone's final norm (`RunConfig`'s)
    word_readout: str | None = None  # which vector of a word a tagger reads (`RunConfig`'s; None: its default)

    @property
    def run_id(self) -> str:
        backbone = backbone_label(self.backbone) if self.backbone else "default"
        size = (
            "" if not TASKS[self.task].few_shot else ("s" if self.sampling == "sentences" else "n") + f"{self.n_shot}/"
        )
        options = (
            (f"/lr{self.learning_rate:g}" if self.learning_rate is not None else "")
            + (f"/{self.pooling}" if self.pooling is not None else "")
            + (f"/L{self.layers}" if self.layers is not None else "")
            + ("/shuffled-labels" if self.shuffle_labels else "")
            + ("/final-norm" if self.through_final_norm else "")
            + (f"/read-{self.word_readout}" if self.word_readout not in (None, "first") else "")
        )
        return f"{self.dataset}/{backbone}/{self.mode}/{self.fusion}/{size}e{self.epochs}/t{self.trial}{options}"

    @property
    def budget_group(self) -> RunSpec:
        """The spec with what runs trained together may differ in blanked (`dwatt.stacked_heads.train_heads`): the epoch
        budget, the learning rate, and for heads on one layer the layer."""
        return replace(self, epochs=0, learning_rate=None, layers=None if probes_layers(self.fusion) else self.layers)

    def run_config(self, output_root: str | Path, **overrides) -> RunConfig:
        """The run's `RunConfig`: every field the two share by name (`SHARED_WITH_CONFIG`; the options left unset
        keep the run's defaults), the trial as the seed, its folder under `output_root`, then `overrides`."""
        shared = {name: getattr(self, name) for name in SHARED_WITH_CONFIG}
        options = {name: value for name, value in shared.items() if value is not None or name in PASSED_WHEN_NONE}
        if not TASKS[self.task].few_shot:  # masked LM trains on the whole split
            options["n_shot"] = None
        return RunConfig(
            **options,
            seed=self.trial,
            output_dir=str(Path(output_root) / self.run_id),
            save_model=False,
            progress=False,
            **overrides,
        )


# RunSpec's fields that are RunConfig's under the same name: RunConfig owns what they mean and their defaults; a spec
# names the run. Those a spec leaves at None keep RunConfig's default, but for the ones where None is a setting.
SHARED_WITH_CONFIG = tuple(f.name for f in fields(RunSpec) if f.name in {f.name for f in fields(RunConfig)})
PASSED_WHEN_NONE = ("backbone", "data_dir", "dev_sentences", "n_shot")


def grid(
    fusions: Iterable[str],
    modes: Iterable[str] = ("fe",),
    n_shots: Iterable[int | None] = (8, 16, 32, 64, 128),
    epochs: Iterable[int] = (25, 50, 75, 100),
    trials: int = 5,
    datasets: Iterable[str] = ("conll2003",),
    backbones: Iterable[str | None] = (None,),
    data_dir: str | None = None,
    task: str = "ner",
    sampling: str = "uniform",
    dev_sentences: int | None = None,
    learning_rate: float | None = None,
    poolings: Iterable[str | None] = (None,),
    learning_rates: Iterable[float | None] | None = None,
    probe_layers: str | None = None,
    through_final_norm: bool = False,
    word_readouts: Iterable[str | None] = (None,),
) -> list[RunSpec]:
    """The cross product, ordered so that every trial's runs come together (one sample, all fusions).
    `learning_rates`: each run at each of them (default: `learning_rate` alone). `probe_layers` (`all`, `every:k`,
    `a-b` or a list, as `--layers`): the Base head once on each of these layers of each backbone, a probe of every
    layer (the runs of one sample train together on one feature cache). `through_final_norm`: every run reads its
    layers through the backbone's final norm. `word_readouts` (tagging): each run with each way of reading a word."""
    if not task_named(task).few_shot:  # masked LM trains on the whole split
        n_shots = (None,)
    rates = tuple(learning_rates) if learning_rates is not None else (learning_rate,)
    fusions, modes, n_shots, epochs, datasets, backbones, poolings, readouts = (
        tuple(values) for values in (fusions, modes, n_shots, epochs, datasets, backbones, poolings, word_readouts)
    )
    for option, values in (
        ("--fusions", fusions),
        ("--modes", modes),
        ("--n-shots", n_shots),
        ("--epochs", epochs),
        ("--datasets", datasets),
        ("--backbones", backbones),
        ("--learning-rates", rates),
        ("--word-readouts", readouts),
    ):
        if not values:
            raise ValueError(f"{option}: no value given, so the grid would hold no run")
    if trials < 1:
        raise ValueError(f"--trials must be >= 1, got {trials}")
    for readout in readouts:
        if readout is not None:
            check_word_readout(readout, task)
    specs = []
    for dataset, backbone, trial, n, e, mode, pooling, readout, fusion, rate in itertools.product(
        datasets, backbones, range(trials), n_shots, epochs, modes, poolings, readouts, fusions, rates
    ):
        layers = probed(backbone, probe_layers) if probes_layers(fusion) and probe_layers is not None else [None]
        specs += [
            RunSpec(
                fusion,
                mode,
                n,
                e,
                trial,
                dataset,
                backbone,
                data_dir,
                task,
                sampling,
                dev_sentences,
                rate,
                pooling,
                layer,
                through_final_norm=through_final_norm,
                word_readout=readout,
            )
            for layer in layers
        ]
    return specs


def probed(backbone: str | None, spec: str) -> list[str]:
    """The layers (0..L, as strings; 0: the embedding output) of `backbone` that `spec` names, for probes; `all` is
    every layer, 1..L."""
    from transformers import AutoConfig

    from configuration_dwatt import parse_fused_layers

    count = AutoConfig.from_pretrained(
        backbone_folder(backbone) if backbone else default_backbone_path()
    ).num_hidden_layers
    return [str(layer) for layer in parse_fused_layers(spec, count, add_last=False, lowest=0)]


def parse_shard(text: str) -> tuple[int, int]:
    """`"i/n"` (0 <= i < n; 0-based like a SLURM array's task ids and torchrun's ranks) as `(i, n)`."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard: expected i/n (e.g. 0/4), got {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard {text}: need 0 <= i < n (shards are numbered from 0)")
    return index, count


def work_unit(spec: RunSpec) -> RunSpec:
    """What a shard takes whole: every fusion and epoch budget of one sample (dataset, backbone, mode, N, trial).
    They read the same frozen-backbone features, so one worker computes those once, and a spec's epoch budgets,
    which may train together, never part."""
    return replace(spec, fusion="", epochs=0, learning_rate=None, layers=None)


def shard(specs: list[RunSpec], index: int, count: int) -> list[RunSpec]:
    """
    Shard `index` of `count` of a grid: its work units (`work_unit`) dealt round-robin in grid order, the specs
    in grid order. The shards of one grid are disjoint and together are the grid, whatever runs finished before;
    a grid of fewer units than shards is refused (some shards would have nothing to do).
    """
    units = list(dict.fromkeys(work_unit(spec) for spec in specs))
    if count > len(units):
        raise ValueError(
            f"--shard {index}/{count}: this grid has {len(units)} units of work (one per dataset, backbone, mode, N "
            f"and trial; every fusion and budget of a unit runs together), so use at most {len(units)} shards"
        )
    mine = set(units[index::count])
    return [spec for spec in specs if work_unit(spec) in mine]


def widest_first(specs: list[RunSpec]) -> list[RunSpec]:
    """The specs with each work unit's fusions that read every layer first: their feature caches hold the one layer
    Base and Base+n read, which then need no backbone pass of their own (`features.FeatureMemo`). Units keep their
    order, and so do the specs within each of the two kinds."""
    units = list(dict.fromkeys(work_unit(spec) for spec in specs))
    return sorted(specs, key=lambda spec: (units.index(work_unit(spec)), reads_one_layer(spec.fusion)))


def probes_layers(fusion: str) -> bool:
    """Whether a grid of `fusion` may spread over the backbone's layers, one head per layer (a probe): heads that pass
    the one layer they read through (`FusionSpec.passes_layer_through`)."""
    return fusion_spec(fusion).passes_layer_through


def reads_one_layer(fusion: str) -> bool:
    """Whether `fusion` reads one layer of the backbone (Base, Base+n) rather than mixing several."""
    spec = fusion_spec(fusion)
    return spec.passes_layer_through or spec.needs_layer_inputs


def stackable(spec: RunSpec, engine: str, use_cache: bool = True) -> bool:
    """Whether `spec` may train with others of its budget group (`budget_group`): FE with the feature cache, of a task
    whose runs train together (`Task.trains_together`), under any engine but "trainer"."""
    return engine != "trainer" and TASKS[spec.task].trains_together and spec.mode == "fe" and use_cache


def engines_for(spec: RunSpec, engine: str, use_cache: bool = True) -> tuple[str, ...]:
    """The engines whose rows are `spec`'s run when a sweep asks for `engine`: "auto" takes either (it picks by the
    size of each group), "stacked" the stacked engine where the run may train with others (the `Trainer` elsewhere),
    "trainer" the `Trainer`."""
    engine = engine_named(engine)
    if engine == "auto":
        return ("stacked", "trainer") if stackable(spec, engine, use_cache) else ("trainer",)
    return ("stacked",) if stackable(spec, engine, use_cache) else ("trainer",)


def batches_of_runs(specs: list[RunSpec], engine: str, use_cache: bool = True) -> list[tuple[bool, list[RunSpec]]]:
    """
    The specs as the groups that train together, each with whether it goes through `run_together`: under the
    "stacked" engine every FE run with the feature cache of a task that may does, its epoch budgets, learning rates
    (and
    a Base head's layers) as one group; under "auto" only groups of more than one run do; under "trainer" none. Groups
    keep the order of their first spec.
    """
    engine = engine_named(engine)
    groups: dict[tuple[bool, RunSpec], list[RunSpec]] = {}
    for spec in specs:
        together = stackable(spec, engine, use_cache)
        groups.setdefault((together, spec.budget_group if together else spec), []).append(spec)
    return [(together and (engine == "stacked" or len(group) > 1), group) for (together, _), group in groups.items()]


PAPER_FUSIONS = ("base", "base_plus_n", "concat", "dwatt")
# The 27 languages of the WikiAnn copy in shared/data (Rahimi et al. 2019 splits); reports group them into
# resource tiers by the size of each language's training split, recorded with every run.
WIKIANN_LANGUAGES = "af ar az bn de en es fr gu hi id jv kk mr ms my pa qu ru sw te tl tr ur vi yo zh".split()

# Each preset is a set of `grid` arguments; command-line options override them. Backbones are the paper's Hub
# names (they need the network); offline, pass `--backbone` a local folder.
PRESETS = {
    # Figures 2-4: the CoNLL-03 grid in the FE setting.
    "conll-fe": dict(fusions=(*PAPER_FUSIONS, "scalar_mix"), backbones=("roberta-large",)),
    # Figure 6: FE against FT at the smallest and largest N.
    "conll-fe-vs-ft": dict(
        fusions=PAPER_FUSIONS, modes=("fe", "ft"), n_shots=(8, 128), epochs=(50,), backbones=("roberta-large",)
    ),
    # Figure 7: the same fusions on a base- and a large-size backbone, 100 epochs.
    "base-vs-large": dict(fusions=PAPER_FUSIONS, epochs=(100,), backbones=("roberta-base", "roberta-large")),
    # Figure 5: WikiAnn English, 100 training sentences, 25 epochs.
    "wikiann-en": dict(
        fusions=PAPER_FUSIONS,
        datasets=("wikiann:en",),
        sampling="sentences",
        n_shots=(100,),
        epochs=(25,),
        backbones=("xlm-roberta-large",),
    ),
    # Figures 8-9: every language, same protocol, grouped by resource tier in the report.
    "wikiann-tiers": dict(
        fusions=PAPER_FUSIONS,
        datasets=tuple(f"wikiann:{lang}" for lang in WIKIANN_LANGUAGES),
        sampling="sentences",
        n_shots=(100,),
        epochs=(25,),
        backbones=("xlm-roberta-large",),
    ),
    # Table 3: WikiText-2 masked-LM perplexity, FT, batch 8, best validation checkpoint.
    "wikitext-mlm": dict(
        fusions=PAPER_FUSIONS,
        modes=("ft",),
        task="mlm",
        datasets=("wikitext2",),
        epochs=(3,),
        trials=1,
        backbones=("roberta-large",),
    ),
    # Beyond the paper: few-shot AG News topic classification (the vendored offline split), FE, N examples per
    # class, the offline default backbone (MiniLM). A CPU budget: 20 epochs at 10x the paper's learning rate (a
    # sample of 16 examples makes one step per epoch), 800 evaluation examples.
    "agnews-fe": dict(
        fusions=(*PAPER_FUSIONS, "scalar_mix"),
        task="cls",
        datasets=("ag_news",),
        n_shots=(4, 8, 16, 32, 64),
        epochs=(20,),
        trials=3,
        dev_sentences=800,
        learning_rate=5e-4,
    ),
    # Which pooling: first-token pooling for every fusion at N = 16 per class, the agnews-fe setting otherwise (whose
    # runs pool by the mean, the default), to compare the two.
    "agnews-pooling": dict(
        fusions=(*PAPER_FUSIONS, "scalar_mix"),
        task="cls",
        datasets=("ag_news",),
        n_shots=(16,),
        epochs=(20,),
        trials=3,
        dev_sentences=800,
        learning_rate=5e-4,
        poolings=("first",),
    ),
    # Depth: the same CoNLL-03 FE grid on backbones of 6, 12 and 30 layers (MiniLM, MPNet, the SmolLM2 decoder LLM;
    # pass them with --backbones), every fusion, scored on one fixed 1000 dev sentences.
    "conll-depth": dict(
        fusions=(*PAPER_FUSIONS, "scalar_mix"),
        n_shots=(8, 32, 128),
        epochs=(25,),
        trials=3,
        dev_sentences=1000,
    ),
    # Few-shot AG News on a decoder LLM: the agnews-fe protocol at N = 4, 16, 64 per class, pooled the model's way
    # (the last token on a decoder); agnews-depth-pooling adds mean pooling at N = 16 to compare.
    "agnews-depth": dict(
        fusions=(*PAPER_FUSIONS, "scalar_mix"),
        task="cls",
        datasets=("ag_news",),
        n_shots=(4, 16, 64),
        epochs=(20,),
        trials=3,
        dev_sentences=800,
        learning_rate=5e-4,
    ),
    "agnews-depth-pooling": dict(
        fusions=(*PAPER_FUSIONS, "scalar_mix"),
        task="cls",
        datasets=("ag_news",),
        n_shots=(16,),
        epochs=(20,),
        trials=3,
        dev_sentences=800,
        learning_rate=5e-4,
        poolings=("mean",),
    ),
    # A minute on a CPU with the offline default backbone: two fusions, one small sample, one short budget, one
    # trial, 200 dev sentences.
    "smoke": dict(fusions=("base", "dwatt"), n_shots=(2,), epochs=(2,), trials=1, dev_sentences=200),
}

__all__ = [
    "ENGINES",
    "ENGINE_ALIASES",
    "PAPER_FUSIONS",
    "PRESETS",
    "WIKIANN_LANGUAGES",
    "WINDOW_RADIUS",
    "RunSpec",
    "batches_of_runs",
    "engine_named",
    "engines_for",
    "grid",
    "parse_shard",
    "probed",
    "probes_layers",
    "reads_one_layer",
    "shard",
    "stackable",
    "widest_first",
    "work_unit",
]
