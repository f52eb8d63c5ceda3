"""The probe's controls, scored on each trial's sample as the chosen head's runs read it: the floor (the majority label
and a model with no backbone, `dwatt.experiment.baselines`), the embedding output probed as layer 0, and the
selectivity control (the chosen head trained on the sample's labels shuffled). What the chosen head scores above them,
it owes to its layer and to the task."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from ..execution import Execution
from .baselines import baselines, mean_scores
from .probe_runs import trained_runs
from .probe_types import ProbeOutcome, ProbeSettings, spec_at

EMBEDDING_LAYER = 0  # the hidden state a probe reads as its floor among the layers: the embedding output


def floor_scores(specs, chosen: tuple[int, float], trials: list[int], settings: ProbeSettings) -> tuple[list, str]:
    """The baselines' scores on each trial's sample, dev and test, averaged over the trials (`mean_scores`), and why
    none was scored where a package they need is missing ("" otherwise)."""
    layer, rate = chosen
    try:
        scores = [
            baselines(spec_at(specs, trial, layer, rate).run_config(settings.folder, **settings.overrides()))
            for trial in trials
        ]
    except ModuleNotFoundError as error:
        return [], str(error)
    return mean_scores(scores), ""


def shuffled_label_scores(
    specs,
    chosen: tuple[int, float],
    trials: list[int],
    settings: ProbeSettings,
    keys: tuple[str, str],
    execution: Execution,
) -> dict[int, dict]:
    """The chosen layer's head at the chosen rate trained again on each trial's sample with its labels shuffled
    (`RunSpec.shuffle_labels`), scored on the real dev and test, into the probe's store (resumed like its runs):
    trial -> {"dev": ..., "test": ...} (x 100; test None where the probe scores no test). `keys`: the results' keys
    of the best dev score and of the test score."""
    layer, rate = chosen
    controls = [replace(spec_at(specs, trial, layer, rate), shuffle_labels=True) for trial in trials]
    rows = trained_runs(settings, controls, execution)
    dev_key, test_key = keys
    scores = {}
    for spec in controls:
        row = rows[spec.run_id]
        test = row.get("test_scores", {}).get(test_key)
        scores[spec.trial] = {"dev": 100 * row[dev_key], "test": None if test is None else 100 * test}
    return scores


def shuffled_label_lines(
    shuffled: dict[int, dict], chosen: tuple[int, float], chosen_dev: float, metric: str
) -> list[str]:
    """The control's scores, mean over the trials, and the chosen head's margin over it on dev (its selectivity)."""
    if not shuffled:
        return []
    layer, rate = chosen
    dev = statistics.fmean(score["dev"] for score in shuffled.values())
    tests = [score["test"] for score in shuffled.values() if score["test"] is not None]
    test = f", test {metric} {statistics.fmean(tests):.2f}" if tests else ""
    return [
        f"control: layer {layer}'s head at {rate:g} trained on shuffled labels: dev {metric} {dev:.2f}{test}; the "
        f"chosen head scores {chosen_dev - dev:+.2f} {metric} above it on dev (what it learnt of the task, not of "
        "the sample)"
    ]


def embedding_layer_lines(outcome: ProbeOutcome) -> list[str]:
    """What the chosen layer adds on dev to the embedding output's head (layer 0, at its own best rate), where the
    probe trained one: the backbone's layers measured against the embeddings alone."""
    if EMBEDDING_LAYER not in outcome.layers:
        return []
    metric = outcome.metrics[2]
    layer, rate = outcome.chosen
    if layer == EMBEDDING_LAYER:
        return ["the chosen layer is the embedding output: no layer of the backbone scores above it on dev"]
    best = outcome.best_rate(EMBEDDING_LAYER)
    floor = outcome.mean(EMBEDDING_LAYER, best)
    test = outcome.mean(EMBEDDING_LAYER, best, "test")
    return [
        f"the embedding output (layer 0) at its best rate {best:g}: dev {metric} {floor:.2f}"
        + ("" if math.isnan(test) else f", test {metric} {test:.2f}")
        + f"; layer {layer} scores {outcome.mean(layer, rate) - floor:+.2f} {metric} above it on dev (what the "
        "backbone's layers add to its embeddings)"
    ]


__all__ = ["EMBEDDING_LAYER", "embedding_layer_lines", "floor_scores", "shuffled_label_lines", "shuffled_label_scores"]
