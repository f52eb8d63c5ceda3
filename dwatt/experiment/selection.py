"""Choices made on dev, scored on test: the fair comparison of layer fusion against heads on single layers.

A method is a way of reading the frozen backbone: a head on the last layer, a head on the best single layer, the
probe's best heads averaged, a fusion (ScalarMix, Concat, Base+n, DWAtt), or a fusion of the layers around the best
single layer, with the last layer or alone (a window, `window_around`: centred where dev chooses that layer, the
second stage of a grid, `around_chosen_layers`). Each method gets its own learning rate, and the best single layer its
own layer as well: in every trial, the run with the best dev score among its learning rates (and layers) is chosen,
and what is reported is that run's test score, never the dev score a choice was made on. Methods are compared paired
by trial (a trial's runs share one few-shot sample).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace

import pandas as pd

from ..portable import backbone_label
from .grid import WINDOW_RADIUS, RunSpec
from .methods import (
    BEST_LAYER,
    ENSEMBLE_METHODS,
    FLOOR_METHODS,
    LAST_LAYER,
    PROBE_METHOD,
    fusion_methods,
    methods,
    window_fusions,
    window_methods,
    with_methods,
)
from .significance import EQUIVALENCE_MARGIN, equivalence_p_value, holm, paired_p_value, tie_robust, verdict_of
from .summaries import PROBE_FUSION, confidence_interval
from .widening import EDGES, edge_of

# The verdict of a paired difference with no interval to judge it by (`verdict`).
NO_INTERVAL = "no interval"

SAMPLE = ["backbone", "dataset", "n_shot", "epochs", "trial"]


def is_fair_grid(frame: pd.DataFrame) -> bool:
    """Whether `frame` (`summaries.runs_frame`) holds runs scored on test at several learning rates or layers."""
    runs = with_methods(frame)
    if runs.empty:
        return False
    probes = runs[runs.fusion == PROBE_FUSION].layer.nunique() > 1
    return probes or runs.groupby([*SAMPLE, "fusion"]).learning_rate.nunique().max() > 1


def backbone_depth(runs: pd.DataFrame):
    """The backbone's last layer L, where the rows say how deep it is; else the deepest layer a probe read."""
    return runs.backbone_layers.max() if runs.backbone_layers.notna().any() else runs.layer.max()


def window_around(centre: int, depth: int, radius: int = WINDOW_RADIUS, alone: bool = False) -> str | None:
    """The fused layers of a window around layer `centre` of a `depth`-layer backbone, as `--layers` takes them:
    "a-b" (clipped to 1..depth; z_L is read besides, as by every fusion), or "only:a-b" (`alone`: those layers
    alone); None where that is every layer (the fusion itself)."""
    first, last = max(1, centre - radius), min(depth, centre + radius)
    if alone:
        return None if first == 1 and last == depth else f"only:{first}-{last}"
    return None if first == 1 and last >= depth - 1 else f"{first}-{last}"


def probe_windows(probe: pd.DataFrame) -> dict[bool, str | None]:
    """The windows (`window_around`, with the last layer and alone) around the layer one sample's probe runs choose on
    their dev scores."""
    centre, depth = int(best_of(probe).layer.iloc[0]), int(backbone_depth(probe))
    return {alone: window_around(centre, depth, alone=alone) for alone in (False, True)}


def candidates(sample: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """`(method, runs)` for each method of one sample: the runs among which the method chooses on dev."""
    base = sample[sample.fusion == PROBE_FUSION]
    if not base.empty:
        # the backbone's last layer L where the rows say how deep it is (a probe of some layers may leave it out)
        last = base[base.layer == backbone_depth(base)]
        if not last.empty:
            yield LAST_LAYER, last
        yield BEST_LAYER, base
        windows = probe_windows(base)
        for (fusion, alone), method in window_methods().items():  # around the layer this sample's dev scores choose
            window = windows[alone]
            own = sample[(sample.method == method) & (sample.fusion == fusion) & (sample.fused_layers == window)]
            if window is not None and not own.empty:
                yield method, own
    for fusion, method in (ENSEMBLE_METHODS | fusion_methods() | FLOOR_METHODS).items():
        own = sample[(sample.fusion == fusion) & (sample.method == method)]
        if not own.empty:
            yield method, own


def around_chosen_layers(
    specs: list[RunSpec], frame: pd.DataFrame, few_shot_dev: bool = False, alone: bool = False
) -> list[RunSpec]:
    """The second stage of a window grid: each spec of a fusion that mixes layers, on the window (`window_around`)
    around the layer its trial's probe (`frame`, `summaries.runs_frame` of the probe's rows) chose on dev, and, with
    `few_shot_dev`, around the one chosen on that trial's few-shot dev sample as well (one spec where both agree; none
    where the window is every layer); `alone`: the window's layers alone (`window_around`). A spec whose trial has no
    probe in `frame` is named."""
    mixing = window_fusions()
    refused = sorted({spec.fusion for spec in specs} - set(mixing))
    if refused:
        raise ValueError(
            f"a window around the best layer is for fusions that mix layers ({', '.join(mixing)}); "
            f"not {', '.join(refused)}"
        )
    choices = {}
    for kind in (False, True) if few_shot_dev else (False,):
        runs = with_methods(frame, kind)
        for key, sample in runs[runs.fusion == PROBE_FUSION].groupby(SAMPLE, dropna=False):
            choices.setdefault(key, []).append(probe_windows(sample)[alone])
    windowed = []
    for spec in specs:
        key = (
            backbone_label(spec.backbone) if spec.backbone else "default",
            spec.dataset,
            spec.n_shot,
            spec.epochs,
            spec.trial,
        )
        if key not in choices or len(choices[key]) < (2 if few_shot_dev else 1):
            raise ValueError(
                f"no probe of every layer, scored on test{' with a few-shot dev sample' if few_shot_dev else ''}, "
                f"for {spec.run_id} in the stores given (backbone, dataset, N, epochs, trial: {key}); run "
                "the probe first (--fusions base --probe-layers all, with the same options)"
            )
        windowed += [replace(spec, layers=window) for window in dict.fromkeys(choices[key]) if window is not None]
    return windowed


# Methods whose choices on dev were made before the report: a probe ensemble's among the probe's runs when it was
# built, the floor's among its regularisations when it was scored.
CHOSEN_ELSEWHERE = (*ENSEMBLE_METHODS.values(), *FLOOR_METHODS.values())


def chosen_on_dev(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per sample and method: the run each method picks on dev (ties: the first in grid order), with
    `best_test_score`, the best test score among the runs it chose from (what a choice on test would have taken;
    NaN where the choice was made before (`CHOSEN_ELSEWHERE`))."""
    picks = [
        best_of(among).assign(
            method=method,
            best_test_score=math.nan if method in CHOSEN_ELSEWHERE else among.test_score.max(),
        )
        for _, sample in runs.groupby(SAMPLE, dropna=False)
        for method, among in candidates(sample)
    ]
    return pd.concat(picks, ignore_index=True) if picks else pd.DataFrame()


# Dev scores this close are one score (800 dev texts give accuracy in steps of 0.125 points: ties happen).
TIE_TOLERANCE = 1e-9
# The order a grid lists one method's runs in (`grid.grid`): by learning rate, then by layer.
GRID_ORDER = ("learning_rate", "layer")


def best_of(runs: pd.DataFrame) -> pd.DataFrame:
    """The run chosen on dev, as one row: the best dev score; where several runs share it (within `TIE_TOLERANCE`),
    the first of them in grid order (`GRID_ORDER`) stands for the choice (its rate and layer), and its `test_score` is
    the mean of the tied runs' (the tie rule, stated in the docs), their own kept in `tied_test_scores`."""
    tied = runs[runs.dev_score >= runs.dev_score.max() - TIE_TOLERANCE]
    tied = tied.sort_values([key for key in GRID_ORDER if key in tied], kind="stable")
    chosen = tied.iloc[[0]].copy()
    chosen["tied_test_scores"] = [list(tied.test_score)]
    chosen["test_score"] = tied.test_score.mean()
    return chosen


def _rates_text(rates) -> str:
    return ", ".join(f"{rate:g}" for rate in rates)


def _dev_sentences(runs: pd.DataFrame) -> float:
    """How many dev sentences the runs were chosen on (NaN where a row does not say: the whole dev split)."""
    sizes = runs.num_dev_sentences.dropna().unique() if "num_dev_sentences" in runs else []
    return float(sizes[0]) if len(sizes) == 1 else math.nan


def paired_against(setting: pd.DataFrame, reference: str, score: str) -> Iterator[tuple[str, pd.DataFrame, pd.Series]]:
    """Each method's runs in one setting (in `methods()` order) with their `score` minus the `reference` method's,
    paired by trial (the trials both have)."""
    theirs = setting[setting.method == reference].set_index("trial")[score]
    for method in methods():
        mine = setting[setting.method == method]
        if not mine.empty:
            yield method, mine, (mine.set_index("trial")[score] - theirs).dropna()


def paired_columns(name: str, differences: pd.Series, is_reference: bool) -> dict:
    """`name` and `name_ci95`: the mean paired difference and its 95% CI (NaN for the reference itself)."""
    if is_reference:
        return {name: math.nan, f"{name}_ci95": math.nan}
    return {
        name: differences.mean() if len(differences) else math.nan,
        f"{name}_ci95": confidence_interval(differences),
    }


def rate_edge(chosen: list[float], tried: list[list[float]]) -> str:
    """`"largest"` or `"smallest"` where most of a method's trials chose that edge of the learning rates their own
    choice's runs tried (`tried[i]`: the rates of trial i's run, and for a probe of its layer; grids widened trial by
    trial differ), so that a rate beyond it might score higher; else `""`; `""` with one rate tried (no grid to be at
    the edge of)."""
    edges = [edge_of(choice, rates) for choice, rates in zip(chosen, tried)]
    return next((edge for edge in EDGES if 2 * edges.count(edge) > len(chosen)), "")


def own_rates(runs: pd.DataFrame) -> Callable[[tuple, pd.DataFrame], list[list[float]]]:
    """For a method's chosen rows, the rates each one's own runs tried: those of its method (`key`: backbone, dataset,
    N, epochs, method), trial and, for a probe's, layer."""
    rates = (
        runs.assign(layer_key=runs.layer.fillna(-1))
        .groupby(["backbone", "dataset", "n_shot", "epochs", "method", "trial", "layer_key"])
        .learning_rate.agg(lambda found: sorted(found.unique()))
    )

    def of(key: tuple, chosen: pd.DataFrame) -> list[list[float]]:
        return [
            rates.loc[(*key, trial, -1 if pd.isna(layer) else layer)]
            for trial, layer in zip(chosen.trial, chosen.layer)
        ]

    return of


def fair_comparison(frame: pd.DataFrame, few_shot_dev: bool = False) -> pd.DataFrame:
    """Per backbone, dataset, N and method: the test score of the dev-chosen runs (mean, 95% CI, trials; the task's
    `metric`), the chosen learning rates (and layers) among the rates tried, the edge of them most trials chose (`rate_edge`),
    and the paired difference in test score to the best single layer. `few_shot_dev`: every choice
    made on each trial's few-shot dev sample instead (`with_methods`)."""
    runs = with_methods(frame, few_shot_dev)
    picks = chosen_on_dev(runs)
    if picks.empty:
        return pd.DataFrame()
    rates_tried = runs.groupby(["backbone", "dataset", "n_shot", "epochs", "method"]).learning_rate.agg(
        lambda rates: sorted(rates.unique())
    )
    rates_of_choice = own_rates(runs)
    members = "sample_members" if few_shot_dev else "members"  # the layers each probe ensemble averaged
    records, tie_choices = [], []
    windows = set(window_methods().values())
    for (backbone, dataset, n_shot, epochs), setting in picks.groupby(["backbone", "dataset", "n_shot", "epochs"]):
        best_ties = setting[setting.method == BEST_LAYER].set_index("trial").tied_test_scores
        for method, mine, differences in paired_against(setting, BEST_LAYER, "test_score"):
            own_ties = mine.set_index("trial").tied_test_scores
            tie_choices.append(
                [[m - b for m in own_ties[trial] for b in best_ties[trial]] for trial in differences.index]
            )
            ensemble = method in ENSEMBLE_METHODS.values()  # its heads are the probe's, each at its own rate
            probe = ensemble or method in (LAST_LAYER, BEST_LAYER)  # their runs are the probe's
            floor = method in FLOOR_METHODS.values()  # no learning rate: its own regularisation, chosen on dev
            key = (backbone, dataset, n_shot, epochs, PROBE_METHOD if probe else method)
            tried = [] if floor else rates_tried.loc[key]
            records.append(
                {
                    "backbone": backbone,
                    "dataset": dataset,
                    "n_shot": n_shot,
                    "epochs": epochs,
                    "method": method,
                    "metric": mine.metric.iloc[0],
                    "test_score": mine.test_score.mean(),
                    "test_ci95": confidence_interval(mine.test_score),
                    "trials": len(mine),
                    "dev_score": mine.dev_score.mean(),
                    "dev_sentences": _dev_sentences(mine),
                    "learning_rates": "each layer's own"
                    if ensemble
                    else ""
                    if floor
                    else _rates_text(mine.learning_rate),
                    "learning_rates_tried": _rates_text(tried),
                    "layers": (
                        "; ".join(mine[members])
                        if ensemble
                        else ", ".join(str(int(layer)) for layer in mine.layer)
                        if method in (LAST_LAYER, BEST_LAYER)
                        else ", ".join(mine.fused_layers)
                        if method in windows
                        else ""
                    ),
                    # selection regret: how much test score the choice on dev left among the method's own candidates
                    "regret": (mine.test_score - mine.best_test_score).mean(),
                    "regret_ci95": confidence_interval(mine.test_score - mine.best_test_score),
                    **paired_columns("minus_best_layer", differences, method == BEST_LAYER),
                    # chosen at an edge of the rates tried in most trials: the optimum may lie beyond it
                    "rate_edge": ""
                    if ensemble or floor
                    else rate_edge(list(mine.learning_rate), rates_of_choice(key, mine)),
                    "p_value": math.nan if method == BEST_LAYER else paired_p_value(list(differences)),
                    "p_equivalence": math.nan
                    if method == BEST_LAYER
                    else equivalence_p_value(list(differences), EQUIVALENCE_MARGIN),
                    "tied_trials": int(sum(len(ties) > 1 for ties in mine.tied_test_scores)),
                }
            )
    table = pd.DataFrame.from_records(records)
    return with_corrected_verdicts(table, tie_choices)


def holm_family(method: str) -> str:
    """The family of tests a method's are Holm-corrected in, per dataset: the fusions and ensembles against the best
    layer are one; the last layer's question (is the probe worth it?) is its own, and so is the floor's (does the
    backbone beat no backbone?), so that neither makes the fusions' correction stricter or looser."""
    return "last layer" if method == LAST_LAYER else "floor" if method in FLOOR_METHODS.values() else "methods"


def with_corrected_verdicts(table: pd.DataFrame, tie_choices: list | None = None) -> pd.DataFrame:
    """`table` with `p_holm` and `p_equivalence_holm` (`significance.holm`: each dataset's method-setting pairs are one
    family, the last layer's settings another, the floor's a third; the difference tests and the equivalence tests
    each corrected over the family), the `verdict` they give (`significance.verdict_of`: beats, trails, within the
    margin, or level: neither shown), and `tie_robust`: whether the difference test's verdict holds over every way of
    breaking the ties on dev (`tie_choices`: per row, per trial, the differences the tied runs could give)."""
    table = table.assign(p_holm=math.nan, p_equivalence_holm=math.nan, verdict="", tie_robust=True)
    if "p_equivalence" not in table:
        table["p_equivalence"] = math.nan
    for _, family in table.groupby([table.dataset, table.method.map(holm_family)], sort=False):
        adjusted = holm(list(family.p_value))
        equivalent = holm(list(family.p_equivalence))
        table.loc[family.index, "p_holm"] = adjusted
        table.loc[family.index, "p_equivalence_holm"] = equivalent
        table.loc[family.index, "verdict"] = [
            "" if method == BEST_LAYER else verdict_of(difference, p, q)
            for method, difference, p, q in zip(family.method, family.minus_best_layer, adjusted, equivalent)
        ]
        if tie_choices is not None:
            p_values = list(family.p_value)
            table.loc[family.index, "tie_robust"] = [
                True
                if math.isnan(p_values[k]) or all(len(choices) == 1 for choices in tie_choices[index])
                else tie_robust(tie_choices[index], p_values, k)
                for k, index in enumerate(family.index)
            ]
    return table


def trial_differences(frame: pd.DataFrame, few_shot_dev: bool = False) -> pd.DataFrame:
    """Every trial's paired difference in test score between each method and the best single layer (both chosen on
    dev, `chosen_on_dev`): one row per backbone, dataset, N, method and trial."""
    picks = chosen_on_dev(with_methods(frame, few_shot_dev))
    records = []
    if picks.empty:
        return pd.DataFrame()
    for (backbone, dataset, n_shot, epochs), setting in picks.groupby(["backbone", "dataset", "n_shot", "epochs"]):
        for method, _, differences in paired_against(setting, BEST_LAYER, "test_score"):
            if method != BEST_LAYER:
                records += [
                    {
                        "backbone": backbone,
                        "dataset": dataset,
                        "n_shot": n_shot,
                        "epochs": epochs,
                        "method": method,
                        "trial": trial,
                        "difference": value,
                    }
                    for trial, value in differences.items()
                ]
    return pd.DataFrame.from_records(records)


def verdict(difference: float, interval: float) -> str:
    """`beats` or `trails` where the 95% CI of a paired difference excludes 0, `level` where it spans 0, `no interval`
    where there is none to judge by: one trial, or the same nonzero difference in every trial (a CI of width 0 says
    nothing about how the difference varies; two trials that happen to agree are no evidence of a gain)."""
    if pd.isna(interval) or (
        math.isclose(interval, 0, abs_tol=1e-9) and not math.isclose(difference, 0, abs_tol=1e-9)
    ):
        return NO_INTERVAL
    return "beats" if difference - interval > 0 else "trails" if difference + interval < 0 else "level"


def verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a `fair_comparison` table other than the best single layer's, with their `verdict` against it
    (every method judged, none singled out by its test score): the corrected one (`with_corrected_verdicts`) where the
    table carries its tests, else whether the uncorrected 95% CI excludes 0 (`verdict`); `no interval` where the CI
    says nothing (one trial, or the same difference in every trial) either way."""
    rows = table[table.method != BEST_LAYER].copy()
    by_interval = [verdict(m, c) for m, c in zip(rows.minus_best_layer, rows.minus_best_layer_ci95)]
    if "p_holm" in rows:
        rows["verdict"] = [
            NO_INTERVAL if said == NO_INTERVAL else verdict_of(m, p, q)
            for said, m, p, q in zip(
                by_interval, rows.minus_best_layer, rows.p_holm, rows.get("p_equivalence_holm", [math.nan] * len(rows))
            )
        ]
    else:
        rows["verdict"] = by_interval
    return rows


def probe_layer_trials(frame: pd.DataFrame, few_shot_dev: bool = False) -> pd.DataFrame:
    """Per sample (backbone, dataset, N, budget, trial) and layer: the Base head's run at its dev-chosen learning
    rate (`best_of`: its `dev_score`, `test_score`, `learning_rate`). `few_shot_dev`: chosen on each trial's few-shot
    dev sample instead (`with_methods`)."""
    runs = with_methods(frame, few_shot_dev)
    base = runs[runs.fusion == PROBE_FUSION]
    if base.empty:
        return pd.DataFrame()
    return pd.concat([best_of(group) for _, group in base.groupby([*SAMPLE, "layer"])], ignore_index=True)


def probe_curve(frame: pd.DataFrame) -> pd.DataFrame:
    """Per backbone, dataset, N and layer: the Base head's test score at its dev-chosen learning rate, mean over
    trials (the figure's curve), beside its dev score."""
    chosen = probe_layer_trials(frame)
    if chosen.empty:
        return chosen
    return (
        chosen.groupby(["backbone", "dataset", "n_shot", "epochs", "layer"])
        .agg(
            metric=("metric", "first"),
            test_score=("test_score", "mean"),
            dev_score=("dev_score", "mean"),
            trials=("trial", "count"),
        )
        .reset_index()
    )


__all__ = [
    "NO_INTERVAL",
    "WINDOW_RADIUS",
    "around_chosen_layers",
    "candidates",
    "chosen_on_dev",
    "fair_comparison",
    "best_of",
    "holm_family",
    "is_fair_grid",
    "probe_curve",
    "probe_layer_trials",
    "probe_windows",
    "trial_differences",
    "verdict",
    "verdicts",
    "window_around",
    "with_corrected_verdicts",
]
