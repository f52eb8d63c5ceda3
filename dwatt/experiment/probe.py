"""
Which layer? `dwatt probe`: a Base head on each chosen layer of a frozen backbone at each of several learning rates,
trained on one feature cache per trial; the layer and rate chosen on dev; a figure of the dev score by layer; and
the chosen head saved as an ordinary checkpoint that runs the backbone only through its layer.

The heads of one trial train together (`run_together`, the stacked engine), each reading its layer out of one cache
of every probed layer (for text classification, pooled sentence vectors).
The choice is the (layer, rate) with the best dev score averaged over the trials; each trial's own choice is printed
beside it, to show how stable it is. The saved head is trial 0's at that choice, trained again alone into its own
folder (the same seed, sample and cache values give the same head as in the probe), cut at its layer. With
`save_ensemble` K, trial 0's heads of the K best layers (`ensemble_members`) are trained again too and saved as one
model that averages their probabilities (`dwatt.serving.ensemble`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ..run_config import RunConfig
from ..schema import ENSEMBLES_FIELD, ranked_members
from ..tasks import TASKS

PROBE_LEARNING_RATES = (3e-4, 1e-3, 3e-3, 1e-2)
# What a probe scores on dev and test, by task: the run's own selection metric.
METRICS = {
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
    test: bool = False
    results: str = "runs/probe/results.jsonl"
    output_root: str | None = None
    output: str | None = None
    save_model: bool = True
    save_ensemble: int | None = None  # also save the heads of this many best layers, averaged, as one model
    train_in_parts: int | None = None  # the heads of a trial train this many at a time, each kept as it ends
    progress: bool = True

    def __post_init__(self) -> None:
        if self.task not in METRICS:
            raise ValueError(f"--task: a probe trains heads for {' or '.join(METRICS)}, not {self.task!r}")
        if self.save_ensemble is not None and self.save_ensemble < 2:
            raise ValueError(
                f"--save-ensemble: an ensemble averages at least 2 layers' heads, not {self.save_ensemble}"
            )
        if self.save_ensemble is not None and not self.save_model:
            raise ValueError("--save-ensemble saves a model: leave out --no-save")
        if not TASKS[self.task].pools and any((self.pooling, self.text_column, self.pair_column, self.label_column)):
            raise ValueError("--pooling and the --*-column options are for text classification: add --task cls")

    @property
    def folder(self) -> Path:
        """Where the figure and the chosen model go: `output`, else beside the results file."""
        return Path(self.output) if self.output else Path(self.results).parent

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
    ensemble: Path | None = None  # the saved ensemble's folder (`save_ensemble`), its members in `ensemble_members`
    ensemble_members: list[tuple[int, float]] = field(default_factory=list)
    # the probe's ensembles (`dwatt.training.probe_ensembles`), where it scored test: size -> one per trial, each
    # {"layers": [...], "dev": ..., "test": ...} (x 100)
    ensembles: dict[int, list[dict]] = field(default_factory=dict)

    @property
    def layers(self) -> list[int]:
        return sorted({layer for _, layer, _ in self.scores})

    @property
    def rates(self) -> list[float]:
        return sorted({rate for _, _, rate in self.scores})

    @property
    def trials(self) -> list[int]:
        return sorted({trial for trial, _, _ in self.scores})

    def depth_text(self) -> str:
        return str(self.depth) if self.depth is not None else "L"

    def mean(self, layer: int, rate: float, split: str = "dev") -> float:
        values = [
            self.scores[trial, layer, rate][split] for trial in self.trials if (trial, layer, rate) in self.scores
        ]
        values = [value for value in values if value is not None]
        return statistics.fmean(values) if values else math.nan


def probe_specs(settings: ProbeSettings):
    from .grid import grid

    return grid(
        fusions=("base",),
        task=settings.task,
        n_shots=(settings.n_shot,),
        epochs=(settings.epochs,),
        trials=settings.trials,
        datasets=(TASKS[settings.task].dataset_for(settings.dataset, settings.data_dir),),
        backbones=(settings.backbone,),
        data_dir=settings.data_dir,
        dev_sentences=settings.dev_sentences,
        learning_rates=settings.learning_rates,
        probe_layers=settings.layers,
        poolings=(settings.pooling,),
    )


def run_probe(settings: ProbeSettings) -> ProbeOutcome:
    """Train (or resume) every head of the probe into `settings.results`, choose on dev, draw the figure and save
    the chosen head (unless `save_model` is off)."""
    from .store import ResultsStore
    from .sweep import run_sweep

    specs = probe_specs(settings)
    layers = len({spec.layers for spec in specs})
    if settings.save_ensemble and settings.save_ensemble > layers:  # said before anything trains
        raise ValueError(f"--save-ensemble {settings.save_ensemble}: the probe has {layers} layers to average")
    overrides = settings.overrides()
    run_sweep(
        specs,
        settings.results,
        settings.output_root,
        progress=settings.progress,
        engine="stacked",
        train_in_parts=settings.train_in_parts,
        **overrides,
    )
    rows = ResultsStore(settings.results).finished(specs, overrides, "stacked")
    outcome = choose(settings.task, [rows[spec.run_id] for spec in specs if spec.run_id in rows])
    outcome.figure = draw(outcome, settings.folder / "probe.png", settings)
    if settings.save_model:
        chosen = spec_at(specs, outcome.trials[0], *outcome.chosen)
        outcome.model, outcome.saved = save_chosen(chosen, settings, outcome)
    if settings.save_ensemble:
        outcome.ensemble_members = ensemble_members(outcome, settings.save_ensemble)
        outcome.ensemble = save_ensemble(specs, settings, outcome)
    return outcome


def choose(task: str, rows: list[dict]) -> ProbeOutcome:
    """The probe's scores by (trial, layer, rate), and the (layer, rate) with the best mean dev score over the
    trials (ties: the shallower layer, then the smaller rate), with each trial's own choice."""
    dev_key, test_key, _ = METRICS[task]
    scores = {}
    for row in rows:
        config = row["config"]
        test = row.get("test_scores", {}).get(test_key)
        scores[row.get("seed", config.get("seed")), int(config["layers"]), config["learning_rate"]] = {
            "dev": 100 * row[dev_key],
            "test": None if test is None else 100 * test,
        }
    if not scores:
        raise ValueError("the probe has no finished run to choose from")
    sizes = {row.get("num_dev_sentences", row.get("num_dev_examples")) for row in rows}
    depths = {row.get("backbone_layers") for row in rows} - {None}
    outcome = ProbeOutcome(
        task,
        scores,
        (0, 0.0),
        {},
        sizes.pop() if len(sizes) == 1 else None,
        depths.pop() if len(depths) == 1 else None,
    )
    for row in rows:
        for entry in row.get(ENSEMBLES_FIELD) or []:
            outcome.ensembles.setdefault(entry["size"], []).append(
                {
                    "layers": [member["layer"] for member in entry["members"]],
                    "dev": 100 * entry[f"best_{test_key}"],
                    "test": 100 * entry["test_scores"][test_key],
                }
            )
    candidates = sorted({(layer, rate) for _, layer, rate in scores})
    outcome.chosen = max(candidates, key=lambda pair: (outcome.mean(*pair), -pair[0], -pair[1]))
    for trial in outcome.trials:
        own = [(layer, rate) for t, layer, rate in scores if t == trial]
        outcome.chosen_per_trial[trial] = max(
            own, key=lambda pair: (scores[(trial, *pair)]["dev"], -pair[0], -pair[1])
        )
    return outcome


def table_lines(outcome: ProbeOutcome) -> list[str]:
    """The dev score by layer (rows) and learning rate (columns), mean over the trials, as printed."""
    _, _, metric = METRICS[outcome.task]
    trials = len(outcome.trials)
    lines = [
        f"dev {metric} by layer and learning rate ({trials} trial{'s' * (trials > 1)}, mean):",
        "  layer  " + "".join(f"{rate:>9g}" for rate in outcome.rates),
    ]
    for layer in outcome.layers:
        lines.append(f"  {layer:>5}  " + "".join(f"{outcome.mean(layer, rate):9.2f}" for rate in outcome.rates))
    return lines


# What dwatt's fair comparison found of the top-3 probe ensemble against the best single layer across settings weighed
# alike (random effects, Holm-corrected: `verdict` in docs/results/fair-cpu and fair-agnews's tables/across_settings.csv;
# tests/test_experiment_probe.py checks these against them), by the dataset it ran on: a probe of a task says it of
# the task's default dataset, beside the ensemble it scored itself.
ENSEMBLE_EVIDENCE = {"conll2003": ("CoNLL-03", "level"), "ag_news": ("AG News", "level")}


def ensemble_evidence(task: str, size: int, saved: bool = False) -> str:
    """One clause on what the fair comparison found of the top-`size` ensemble on `task`'s default dataset, or ""
    (`saved`: this probe saved it already, so the clause does not ask for it again)."""
    dataset, verdict = ENSEMBLE_EVIDENCE.get(TASKS[task].default_dataset, (None, None))
    if size != 3 or dataset is None:
        return ""
    if verdict == "beats":
        return (
            f"; on {dataset}, dwatt's fair comparison found the top-3 average ahead of the best single layer across "
            "settings weighed alike (docs/results.md)" + ("" if saved else ": keep it with --save-ensemble 3")
        )
    return (
        f"; on {dataset}, dwatt's fair comparison did not find the top-3 average ahead of the best single layer "
        "across settings weighed alike (docs/results.md): the single layer's head is the simpler model to serve"
    )


def summary_lines(outcome: ProbeOutcome) -> list[str]:
    """The choice, its scores, how stable it was across trials, and where the figure and the model are."""
    _, _, metric = METRICS[outcome.task]
    layer, rate = outcome.chosen
    test = outcome.mean(layer, rate, "test")
    lines = [
        f"chosen on dev: layer {layer} of {outcome.depth_text()} at learning rate {rate:g}: dev {metric} "
        f"{outcome.mean(layer, rate):.2f}" + ("" if math.isnan(test) else f", test {metric} {test:.2f}")
    ]
    if len(outcome.trials) > 1:
        picks = ", ".join(
            f"layer {pick_layer} at {pick_rate:g}" for pick_layer, pick_rate in outcome.chosen_per_trial.values()
        )
        agree = sum(pick[0] == layer for pick in outcome.chosen_per_trial.values())
        lines.append(f"each trial's own choice: {picks} ({agree} of {len(outcome.trials)} on layer {layer})")
    for size, ensembles in sorted(outcome.ensembles.items()):
        layers = "; ".join(", ".join(map(str, ensemble["layers"])) for ensemble in ensembles)
        lines.append(
            f"the {size} best layers' heads averaged (layers {layers}; --save-ensemble {size} saves it as one model): "
            f"dev {metric} {statistics.fmean(e['dev'] for e in ensembles):.2f}, "
            f"test {metric} {statistics.fmean(e['test'] for e in ensembles):.2f}"
            + ensemble_evidence(outcome.task, size, saved=len(outcome.ensemble_members) == size)
        )
    last = max(outcome.layers)
    if last != layer and outcome.depth is not None and last == outcome.depth:
        best_rate = max(outcome.rates, key=lambda r: outcome.mean(last, r))
        lines.append(
            f"the last layer ({last}) at its best rate {best_rate:g}: dev {metric} {outcome.mean(last, best_rate):.2f}"
        )
    if outcome.figure:
        lines.append(f"figure: {outcome.figure}")
    if outcome.model:
        lines.append(
            f"model: {outcome.model} (runs layers 1-{layer} of {outcome.depth_text()}; "
            f'dwatt predict {outcome.model} "...", dwatt export {outcome.model} OUT --quantize int8)'
        )
    if outcome.ensemble:
        members = ", ".join(f"{member} at {rate:g}" for member, rate in outcome.ensemble_members)
        lines.append(
            f"ensemble: {outcome.ensemble} (the {len(outcome.ensemble_members)} best layers' heads of trial "
            f"{outcome.trials[0]} averaged: layers {members}; runs layers 1-"
            f"{max(member for member, _ in outcome.ensemble_members)} of {outcome.depth_text()} once for all; "
            f'dwatt predict {outcome.ensemble} "...", dwatt export {outcome.ensemble} OUT --quantize int8)'
        )
    return lines


def draw(outcome: ProbeOutcome, path: Path, settings: ProbeSettings) -> Path | None:
    """Dev score by layer, one line per learning rate, the chosen layer and rate marked; test beside it (the chosen
    rate's test score by layer) where the probe scored test. None, with a note, where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        print('no figure: it needs matplotlib (pip install "dwatt[report]")')
        return None
    _, _, metric = METRICS[outcome.task]
    has_test = any(score["test"] is not None for score in outcome.scores.values())
    figure, axis = plt.subplots(figsize=(6.4, 3.8))
    layers = outcome.layers
    for rate in outcome.rates:
        axis.plot(
            layers,
            [outcome.mean(layer, rate) for layer in layers],
            "o-",
            markersize=3,
            linewidth=1.2,
            label=f"dev, lr {rate:g}",
        )
    layer, rate = outcome.chosen
    axis.plot(
        [layer],
        [outcome.mean(layer, rate)],
        marker="*",
        markersize=14,
        color="black",
        linestyle="none",
        label=f"chosen: layer {layer}, lr {rate:g}",
    )
    if has_test:
        axis.plot(
            layers,
            [outcome.mean(k, rate, "test") for k in layers],
            "s--",
            color="black",
            markersize=3,
            linewidth=1,
            label=f"test, lr {rate:g}",
        )
    trials = len(outcome.trials)
    backbone = Path(settings.backbone).name if settings.backbone else "the default backbone"
    axis.set(
        xlabel="layer",
        ylabel=f"{metric} (x 100)",
        title=f"{backbone}: a head on each layer ({trials} trial{'s' * (trials > 1)}, mean)",
    )
    axis.set_xticks(layers if len(layers) <= 16 else layers[:: math.ceil(len(layers) / 16)])
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def save_chosen(spec, settings: ProbeSettings, outcome: ProbeOutcome) -> tuple[Path, dict]:
    """Train the chosen head of the first trial again, alone, into `<folder>/chosen` with its checkpoint (cut at its
    layer), and write its model card with how it was chosen. Returns the checkpoint folder and the run's results."""
    from ..checkpoints import load_checkpoint
    from ..hub import model_card
    from ..training import run_together

    folder = settings.folder / "chosen"
    config = saving_config(spec, settings, folder)
    model_folder = folder / "model"
    results = _finished(config, folder)  # a probe run again keeps the head it saved for the same choice
    if results is None:
        results = run_together([config])[0]
    model, _, _ = load_checkpoint(str(model_folder))
    card = model_card(model, results, heads_only=False, has_tokenizer=True)
    (model_folder / "README.md").write_text(
        card.rstrip("\n") + "\n\n" + "\n".join(choice_section(outcome, settings, results)) + "\n"
    )
    return model_folder, results


def spec_at(specs, trial: int, layer: int, rate: float):
    """The probe's run of `trial` on `layer` at `rate`."""
    return next(
        spec for spec in specs if spec.trial == trial and (int(spec.layers), spec.learning_rate) == (layer, rate)
    )


def saving_config(spec, settings: ProbeSettings, folder: Path) -> RunConfig:
    """`spec`'s run as the probe trains it again alone to keep its model: into `folder`, saved, quiet."""
    from .sweep import sweep_feature_cache, sweep_output_root

    cache = sweep_feature_cache(sweep_output_root(settings.results, settings.output_root))
    config = spec.run_config(settings.folder, feature_cache_dir=str(cache), **settings.overrides())
    config.output_dir, config.save_model, config.progress = str(folder), True, False
    return config


def ensemble_members(outcome: ProbeOutcome, size: int) -> list[tuple[int, float]]:
    """The (layer, rate) of the `size` best layers' heads of the probe's first trial, best first: each layer at its
    best rate on dev, the layers ranked by that score, as the probe's ensembles are (`ranked_members`)."""
    trial = outcome.trials[0]
    runs = [(layer, rate) for t, layer, rate in outcome.scores if t == trial]
    if size > len({layer for layer, _ in runs}):
        raise ValueError(
            f"--save-ensemble {size}: the probe has {len({layer for layer, _ in runs})} layers to average"
        )
    ranked = ranked_members(
        [layer for layer, _ in runs], [outcome.scores[trial, layer, rate]["dev"] for layer, rate in runs]
    )
    return [runs[index] for index in ranked[:size]]


def save_ensemble(specs, settings: ProbeSettings, outcome: ProbeOutcome) -> Path:
    """Train the ensemble's members (`outcome.ensemble_members`) again, together, each into
    `<folder>/ensemble-<size>/layer-<k>` (the deepest whole, cut at its layer, the others head-only: `store_member`),
    and write the folder `dwatt predict` runs as one model (`dwatt.serving.ensemble`): the members best first, and a
    model card."""
    from ..checkpoints import write_ensemble
    from ..training import run_together

    trial, members = outcome.trials[0], outcome.ensemble_members
    folder = settings.folder / f"ensemble-{len(members)}"
    configs = [
        saving_config(spec_at(specs, trial, layer, rate), settings, folder / f"layer-{layer}")
        for layer, rate in members
    ]
    pending = [config for config in configs if _finished(config, Path(config.output_dir)) is None]
    if pending:
        run_together(pending)
    deepest = max(layer for layer, _ in members)
    for config, (layer, _) in zip(configs, members):  # also members an earlier, stopped run saved otherwise
        store_member(Path(config.output_dir) / "model", whole=layer == deepest)
    _, _, metric = METRICS[outcome.task]
    about = {
        "task": outcome.task,
        "chosen_on": "dev",
        "trial": trial,
        "layers": [layer for layer, _ in members],
        "learning_rates": [rate for _, rate in members],
    }
    write_ensemble(folder, [f"layer-{layer}/model" for layer, _ in members], about)
    rows = [f"| {layer} | {rate:g} | {outcome.scores[trial, layer, rate]['dev']:.2f} |" for layer, rate in members]
    (folder / "README.md").write_text(
        "\n".join(
            [
                f"# The {len(members)} best layers' heads of a probe, averaged",
                "",
                f"`dwatt probe` trained a head on each of layers {_span(outcome.layers)} at learning rates "
                f"{', '.join(f'{r:g}' for r in outcome.rates)}; these are trial {trial}'s heads of the {len(members)} layers "
                f"with the best dev {metric} (each at its best rate), their class probabilities averaged. `dwatt predict` and "
                f"`dwatt evaluate` run this folder as one model: the backbone once, through layer "
                f"{max(layer for layer, _ in members)}, then every head; `--quantize int8` runs it int8 on a CPU, and `dwatt "
                f"export` writes it as one ONNX graph.",
                "",
                f"| layer | learning rate | dev {metric} of its head |",
                "|---|---|---|",
                *rows,
                "",
            ]
        )
    )
    return folder


def store_member(model_folder: Path, whole: bool) -> None:
    """An ensemble member's checkpoint as its ensemble keeps it. The member that reads deepest is kept `whole`, cut at
    its layer: it carries the backbone every member shares (`SharedBackboneHeads` runs it once, loaded from that
    member). The others keep their heads only and name the backbone, as a LoRA run's checkpoint does: the folder
    stores the backbone once, not K times, and each member still loads alone, with the backbone it names. A member
    trained beside deeper ones was saved with their layers: it is cut. The folder is replaced whole; one already
    stored as asked is left as it is."""
    from ..atomic import give_usual_modes, read_json, replace_folder, scratch_folder
    from ..checkpoints import load_checkpoint, stored_keys

    stored_whole = not read_json(model_folder / "config.json").get("heads_only")
    model, tokenizer, _ = load_checkpoint(str(model_folder))  # loads only the layers its head reads
    if model.config.backbone_depth is not None:  # recorded deeper: cut it
        model.dwatt.cut_backbone()
    elif stored_whole == whole and (not whole or stored_keys(model_folder) <= set(model.state_dict())):
        return  # as asked, and a whole one stores no layer past its own
    with scratch_folder(model_folder) as staging:
        model.save_pretrained(staging, heads_only=not whole)
        tokenizer.save_pretrained(staging)
        give_usual_modes(staging)
        replace_folder(staging, model_folder)


def _finished(config: RunConfig, folder: Path) -> dict | None:
    """The results of the run `config` asks for, where `folder` holds it finished with its model."""
    from dataclasses import asdict

    from ..atomic import read_json
    from .store import run_settings

    if not (folder / "results.json").is_file() or not (folder / "model" / "config.json").is_file():
        return None
    saved = read_json(folder / "results.json")
    return saved if run_settings(saved.get("config", {})) == run_settings(asdict(config)) else None


def choice_section(outcome: ProbeOutcome, settings: ProbeSettings, results: dict) -> list[str]:
    """The model card's account of how this head was chosen."""
    dev_key, test_key, metric = METRICS[outcome.task]
    layer, rate = outcome.chosen
    test = results.get("test_scores", {}).get(test_key)
    dev_size = f"{outcome.dev_size} dev {TASKS[outcome.task].items}" if outcome.dev_size else "the dev split"
    lines = [
        "## How this head was chosen",
        "",
        f"`dwatt probe` trained a head on each of layers {_span(outcome.layers)} of the frozen backbone at learning "
        f"rates {', '.join(f'{r:g}' for r in outcome.rates)} ({len(outcome.layers) * len(outcome.rates)} candidates, "
        f"{len(outcome.trials)} trial{'s' * (len(outcome.trials) > 1)}, N = {settings.n_shot}, {settings.epochs} epochs) "
        f"and chose layer {layer} at {rate:g}, the best mean dev {metric} over the trials on {dev_size}.",
        "",
        f"- This head (trial {outcome.trials[0]}): dev {metric} {100 * results[dev_key]:.2f}"
        + ("" if test is None else f", test {metric} {100 * test:.2f}"),
        f"- The model runs layers 1-{layer} of the backbone's {outcome.depth_text()}: the layers past it are not "
        "computed and not stored.",
    ]
    if len(outcome.trials) > 1:
        lines.append(
            "- Each trial's own choice: "
            + ", ".join(f"layer {pick[0]} at {pick[1]:g}" for pick in outcome.chosen_per_trial.values())
        )
    return lines


def _span(layers: list[int]) -> str:
    return (
        f"{layers[0]}-{layers[-1]}"
        if layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 2
        else ", ".join(map(str, layers))
    )


__all__ = [
    "ENSEMBLE_EVIDENCE",
    "PROBE_LEARNING_RATES",
    "ProbeOutcome",
    "ProbeSettings",
    "choose",
    "run_probe",
    "ensemble_evidence",
    "summary_lines",
    "table_lines",
]
