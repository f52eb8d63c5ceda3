"""
Which layer? `dwatt probe`: a Base head on each chosen layer of a frozen backbone at each of several learning rates,
trained on one feature cache per trial; the layer and rate chosen on dev; a figure of the dev score by layer; and
the chosen head saved as an ordinary checkpoint that runs the backbone only through its layer.

The heads of one trial train together (`run_together`, the stacked engine), each reading its layer out of one cache
of every probed layer (for text classification, pooled sentence vectors). Where a layer's best rate is an edge of the
rates, the grid widens past it (`widening`). The choice is the (layer, rate) with the best dev score averaged over
the trials; each trial's own choice is printed beside it, to show how stable it is. The saved head is trial 0's at
that choice, trained again alone into its own folder (the same seed, sample and cache values give the same head as
in the probe), cut at its layer; with `save_ensemble` K, trial 0's heads of the K best layers are trained again too
and saved as one model that averages their probabilities (`probe_models`, `dwatt.serving.ensemble`).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from specs_dwatt import layers_to_run

from ..data.tag_sets import describe
from ..execution import Execution
from ..schema import ENSEMBLES_FIELD
from ..tasks import TASKS
from .baselines import floor_lines
from .grid import grid, probed
from .probe_controls import (
    EMBEDDING_LAYER,
    embedding_layer_lines,
    floor_scores,
    shuffled_label_lines,
    shuffled_label_scores,
)
from .probe_models import ensemble_members, save_chosen, save_ensemble
from .probe_runs import trained_runs
from .probe_types import PROBE_LEARNING_RATES, ProbeOutcome, ProbeSettings, layer_span, metrics, spec_at
from .widening import Widening


def probe_specs(settings: ProbeSettings, learning_rates: tuple[float, ...] | None = None):
    """The probe's runs: a Base head on each layer at each of `learning_rates` (default: the rates asked for), the
    embedding output (layer 0) among the layers with the baselines (`ProbeSettings.baselines`)."""

    layers = probed(settings.backbone, settings.layers)
    if settings.baselines and str(EMBEDDING_LAYER) not in layers:
        layers = [str(EMBEDDING_LAYER), *layers]
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
        learning_rates=learning_rates or settings.learning_rates,
        probe_layers=",".join(layers),
        poolings=(settings.pooling,),
        through_final_norm=settings.through_final_norm,
        word_readouts=(None if settings.word_readout == "first" else settings.word_readout,),
    )


def run_probe(settings: ProbeSettings, execution: Execution) -> ProbeOutcome:
    """Train (or resume) every head of the probe into `settings.store`, widening the rates while a layer's best
    rate sits at an edge of them (`settings.widen` rates a side at most: `Widening`; only the added rates train),
    choose on dev, draw the figure and save the chosen head (unless `save_model` is off). `execution`: how the heads
    train (`dwatt.training.EXECUTION`)."""
    rates = tuple(sorted(settings.learning_rates))
    specs = probe_specs(settings, rates)
    asked = {spec.run_id for spec in specs}
    layers = len({spec.layers for spec in specs})
    if settings.save_ensemble and settings.save_ensemble > layers:  # said before anything trains
        raise ValueError(f"--save-ensemble {settings.save_ensemble}: the probe has {layers} layers to average")
    widening = Widening(settings.widen)
    while True:
        rows = trained_runs(settings, specs, execution, settings.train_in_parts)
        found = [spec.run_id for spec in specs if spec.run_id in rows]
        # the probe's ensembles average heads trained together: those of the rates asked for, not of a widening's
        outcome = choose(settings.task, [rows[i] for i in found], [rows[i] for i in found if i in asked])
        added = widening.more(list(rates), set(outcome.edges())) if len(rates) > 1 else []
        if not added:
            break
        rates = tuple(sorted(rates + tuple(added)))
        specs = probe_specs(settings, rates)
    outcome.widening = widening
    if settings.baselines:
        outcome.floor, outcome.floor_missing = floor_scores(specs, outcome.chosen, outcome.trials, settings)
        outcome.shuffled = shuffled_label_scores(
            specs, outcome.chosen, outcome.trials, settings, outcome.metrics[:2], execution
        )
    outcome.figure = draw(outcome, settings.folder / "probe.png", settings)
    if settings.save_model:
        chosen = spec_at(specs, outcome.trials[0], *outcome.chosen)
        outcome.model, outcome.saved, outcome.stock_refusal = save_chosen(chosen, settings, outcome, execution)
    if settings.save_ensemble:
        outcome.ensemble_members = ensemble_members(outcome, settings.save_ensemble)
        outcome.ensemble = save_ensemble(specs, settings, outcome, execution)
    return outcome


def choose(task: str, rows: list[dict], ensemble_rows: list[dict] | None = None) -> ProbeOutcome:
    """The probe's scores by (trial, layer, rate), and the (layer, rate) with the best mean dev score over the
    trials (ties: the shallower layer, then the smaller rate), with each trial's own choice; the probe ensembles
    that `ensemble_rows` (default: `rows`) hold."""
    dev_key, test_key, _ = metrics()[task]
    scores, unseen = {}, {}
    for row in rows:
        config = row["config"]
        trial = row.get("seed", config.get("seed"))
        test = row.get("test_scores", {}).get(test_key)
        scores[trial, int(config["layers"]), config["learning_rate"]] = {
            "dev": 100 * row[dev_key],
            "test": None if test is None else 100 * test,
        }
        for label, counts in (row.get("unseen_labels") or {}).items():
            unseen.setdefault(label, {})[trial] = counts
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
    outcome.unseen_labels = unseen
    outcome.labels = rows[0].get("labels")
    for row in rows if ensemble_rows is None else ensemble_rows:
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
    _, _, metric = metrics()[outcome.task]
    trials = len(outcome.trials)
    lines = [
        f"dev {metric} by layer and learning rate ({trials} trial{'s' * (trials > 1)}, mean):",
        "  layer  " + "".join(f"{rate:>9g}" for rate in outcome.rates),
    ]
    for layer in outcome.layers:
        lines.append(f"  {layer:>5}  " + "".join(f"{outcome.mean(layer, rate):9.2f}" for rate in outcome.rates))
    if EMBEDDING_LAYER in outcome.layers:
        lines.append(f"  (layer {EMBEDDING_LAYER}: the embedding output, before the backbone's first layer)")
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
    _, _, metric = metrics()[outcome.task]
    layer, rate = outcome.chosen
    test = outcome.mean(layer, rate, "test")
    lines = [
        f"chosen on dev: layer {layer} of {outcome.depth_text()} at learning rate {rate:g}: dev {metric} "
        f"{outcome.mean(layer, rate):.2f}" + ("" if math.isnan(test) else f", test {metric} {test:.2f}")
    ]
    if outcome.labels and TASKS[outcome.task].kind == "tagging":
        lines.append(f"tags: {describe(outcome.labels)}")
    lines += tie_lines(outcome)
    lines += unseen_label_lines(outcome)
    lines += widening_lines(outcome)
    widened = outcome.widening is not None and any(outcome.widening.added.values())
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
            + (" (of the heads at the rates asked for, trained together)" if widened else "")
            + ensemble_evidence(outcome.task, size, saved=len(outcome.ensemble_members) == size)
        )
    last = max(outcome.layers)
    if last != layer and outcome.depth is not None and last == outcome.depth:
        best_rate = max(outcome.rates, key=lambda r: outcome.mean(last, r))
        lines.append(
            f"the last layer ({last}) at its best rate {best_rate:g}: dev {metric} {outcome.mean(last, best_rate):.2f}"
        )
    lines += embedding_layer_lines(outcome)
    if outcome.floor_missing or outcome.floor:
        lines += floor_lines(outcome.floor, outcome.mean(layer, rate), outcome.metrics[2], outcome.floor_missing)
    lines += shuffled_label_lines(outcome.shuffled, outcome.chosen, outcome.mean(layer, rate), metric)
    if outcome.figure:
        lines.append(f"figure: {outcome.figure}")
    if outcome.model:
        lines.append(
            f"model: {outcome.model} (runs layers 1-{layers_to_run([layer])} of {outcome.depth_text()}; "
            f'dwatt predict {outcome.model} "...", dwatt export {outcome.model} OUT --quantize int8)'
        )
        lines.append(
            f"served without dwatt: dwatt export {outcome.model} OUT --format transformers (a stock model, no remote "
            "code)"
            if outcome.stock_refusal is None
            else f"no stock export: {outcome.stock_refusal}"
        )
    if outcome.ensemble:
        members = ", ".join(f"{member} at {rate:g}" for member, rate in outcome.ensemble_members)
        lines.append(
            f"ensemble: {outcome.ensemble} (the {len(outcome.ensemble_members)} best layers' heads of trial "
            f"{outcome.trials[0]} averaged: layers {members}; runs layers 1-"
            f"{layers_to_run(member for member, _ in outcome.ensemble_members)} of {outcome.depth_text()} once for all; "
            f'dwatt predict {outcome.ensemble} "...", dwatt export {outcome.ensemble} OUT --quantize int8)'
        )
    return lines


def tie_lines(outcome: ProbeOutcome) -> list[str]:
    """Where other candidates have the chosen one's mean dev score: which, and how `choose` broke the tie."""
    layer, rate = outcome.chosen
    best = outcome.mean(layer, rate)
    tied = [
        f"layer {other} at {other_rate:g}"
        for other in outcome.layers
        for other_rate in outcome.rates
        if (other, other_rate) != (layer, rate) and math.isclose(outcome.mean(other, other_rate), best, abs_tol=1e-9)
    ]
    if not tied:
        return []
    return [f"tied on dev with {', '.join(tied)}: the shallower layer is chosen, then the smaller rate"]


def unseen_label_lines(outcome: ProbeOutcome) -> list[str]:
    """The labels an evaluation split holds that a trial's training examples lack: every head scores their rows as
    errors (the model never saw one), said in the summary, not only as a warning while the runs train."""
    if not outcome.unseen_labels:
        return []
    described = []
    for label, by_trial in sorted(outcome.unseen_labels.items()):
        counts = next(iter(by_trial.values()))
        where = ", ".join(f"{rows} in {split}" for split, rows in counts.items())
        trials = (
            "every trial"
            if set(by_trial) == set(outcome.trials)
            else f"trial{'s' * (len(by_trial) > 1)} {layer_span(sorted(by_trial))}"
        )
        described.append(f"{label!r} ({where}; {trials})")
    return [f"labels no training example carries, scored as errors wherever they occur: {', '.join(described)}"]


def widening_lines(outcome: ProbeOutcome) -> list[str]:
    """The rates the grid gained past its edges, and any layer whose best rate still stands at an edge, with the limit
    that stopped the grid there."""
    widening = outcome.widening
    if widening is None:
        return []
    added = [
        f"{', '.join(f'{rate:g}' for rate in rates)} {'above' if edge == 'largest' else 'below'}"
        for edge, rates in widening.added.items()
        if rates
    ]
    lines = [f"rates added where a layer's best dev rate sat at an edge: {'; '.join(added)}"] if added else []
    for edge, layers in outcome.edges().items():
        rate = max(outcome.rates) if edge == "largest" else min(outcome.rates)
        chosen = " (the chosen layer among them)" if outcome.chosen[0] in layers else ""
        why = widening.limits.get(edge, "not widened")
        lines.append(
            f"at the {edge} rate tried, {rate:g}, layer{'s' * (len(layers) > 1)} {layer_span(layers)}{chosen} still "
            f"score{'s' * (len(layers) == 1)} best: {why}; the optimum may lie beyond it"
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
        print('no figure: it needs matplotlib (pip install "dwatt[probe]")')
        return None
    _, _, metric = metrics()[outcome.task]
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
