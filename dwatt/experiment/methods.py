"""The methods of the fair comparison: each way of reading the frozen backbone, named as tables name it.

A method is a head on the last layer, a head on the best single layer, the probe's best heads averaged, a fusion
(named as its spec declares it, in its spec's table order), a fusion of a window of layers around the best single
layer, or the floor. `with_methods` gives each stored run its method and its task's dev and test scores; the choices
among a method's runs are `selection`'s.
"""

from __future__ import annotations

import pandas as pd

from specs_dwatt import FUSION_SPECS, table_order

from ..schema import ENSEMBLE_SIZES
from ..tasks import TASKS
from .floor import MAJORITY_LABEL, NO_BACKBONE
from .grid import WINDOW_RADIUS
from .summaries import PROBE_FUSION, ensemble_fusion, fusion_names

LAST_LAYER, BEST_LAYER = "last layer", "best single layer"
# Methods built from the probe that choose no single layer: the top layers' heads, their probabilities averaged
# (`dwatt.training.probe_ensembles`); each picks its layers, and each layer its learning rate, on dev.
ENSEMBLE_METHODS = {ensemble_fusion(size): f"top-{size} layers averaged" for size in ENSEMBLE_SIZES}
# The floor (`floor.floor_rows`): no way of reading the backbone at all, scored on the same samples and paired alike.
FLOOR_METHODS = {MAJORITY_LABEL: "majority label", NO_BACKBONE: "no backbone"}
# What the coverage table calls the probe's runs: a Base head on every layer.
PROBE_METHOD = "Base (probe)"


def scores() -> dict[str, tuple[str, str, str]]:
    """The score each few-shot task's choices are made on (its dev column) and reported in (its test column), x 100,
    and its name, from the tasks' records."""
    return {task.name: (task.score, f"test_{task.score}", task.score_name) for task in TASKS.values() if task.few_shot}


def fusion_methods() -> dict[str, str]:
    """Every fusion but the probe's as a method, named as the fusion declares itself, in its spec's table order."""
    names = fusion_names()
    return {name: names[name] for name in table_order() if name != PROBE_FUSION}


def window_methods() -> dict[tuple[str, bool], str]:
    """Fusions of the layers within WINDOW_RADIUS of the best single layer, for the fusions that mix the layers they
    are given, keyed by (fusion, alone): with z_L besides (as every fusion reads it), or alone (`"only:a-b"`: the
    window's deepest layer is where the others read z_L, and the backbone runs no deeper). The window is centred where
    the probe's choice on dev is, per trial."""
    return {
        (name, alone): f"{method}, best layer ±{WINDOW_RADIUS}" + ("" if alone else " and the last")
        for name, method in fusion_methods().items()
        if FUSION_SPECS[name].mixes_layers
        for alone in (False, True)
    }


def window_fusions() -> tuple[str, ...]:
    """The fusions a window of layers is run with (`window_methods`)."""
    return tuple(dict.fromkeys(fusion for fusion, _ in window_methods()))


def methods() -> tuple[str, ...]:
    """Every method, in the order tables list them."""
    return (
        LAST_LAYER,
        BEST_LAYER,
        *ENSEMBLE_METHODS.values(),
        *window_methods().values(),
        *fusion_methods().values(),
        *FLOOR_METHODS.values(),
    )


def method_of_fusion() -> dict[str, str]:
    """What the coverage table calls the runs of each fusion."""
    return {PROBE_FUSION: PROBE_METHOD, **ENSEMBLE_METHODS, **fusion_methods()}


def with_methods(frame: pd.DataFrame, few_shot_dev: bool = False) -> pd.DataFrame:
    """The runs scored on test (NER and text classification) with their method (the fusion's name; the probe for
    a Base head) and their task's scores: `dev_score`, `test_score` and the `metric` they are (`scores`).
    `few_shot_dev`: the scores of each run's choice on its few-shot dev sample instead (NER runs that made one), and
    `num_dev_sentences` that sample's size."""
    columns = (
        {task: (f"sample_{dev}", f"sample_test_{dev}", metric) for task, (dev, _, metric) in scores().items()}
        if few_shot_dev
        else scores()
    )
    parts = [
        frame[(frame.task == task) & frame[test].notna()].assign(
            dev_score=lambda runs, dev=dev: runs[dev], test_score=lambda runs, test=test: runs[test], metric=metric
        )
        for task, (dev, test, metric) in columns.items()
        if not frame.empty and test in frame
    ]
    if few_shot_dev:
        parts = [part.assign(num_dev_sentences=part.sample_sentences) for part in parts]
    runs = pd.concat(parts) if parts else pd.DataFrame(columns=[*frame.columns, "dev_score", "test_score", "metric"])
    windows, of_fusion = window_methods(), method_of_fusion()
    return runs.assign(
        method=[
            windows[fusion, layers.startswith("only:")]
            if (fusion, False) in windows and isinstance(layers, str)
            else of_fusion.get(fusion, FLOOR_METHODS.get(fusion, fusion))
            for fusion, layers in zip(runs.fusion, runs.fused_layers)
        ]
    )


__all__ = [
    "BEST_LAYER",
    "ENSEMBLE_METHODS",
    "FLOOR_METHODS",
    "LAST_LAYER",
    "PROBE_METHOD",
    "fusion_methods",
    "method_of_fusion",
    "methods",
    "scores",
    "window_fusions",
    "window_methods",
    "with_methods",
]
