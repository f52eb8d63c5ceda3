"""The runs a fair grid's stores hold against the grid their rows span (`coverage`): what the tables speak for."""

from __future__ import annotations

import collections

import pandas as pd

from .methods import ENSEMBLE_METHODS, PROBE_METHOD, method_of_fusion, window_methods, with_methods
from .selection import backbone_depth, probe_windows
from .summaries import PROBE_FUSION


def coverage(frame: pd.DataFrame) -> pd.DataFrame:
    """
    Per backbone, dataset, N and method, the runs the stores hold against the grid their rows span: every trial any
    row of the backbone has, the N values any row of the dataset has, every method any row has, each method at every
    learning rate
    it was tried at on that backbone and at the rates most methods were tried at (each backbone's methods counted
    apart: the grid's own), and the
    single-layer heads on every layer of the backbone; a window fusion in the trials whose probe chose a layer a window
    around which is not every layer, around each choice its probe made (on dev, and on the few-shot dev sample where
    it made one; only runs on those windows count), and where none did, or no probe ran, it has no cell. A setting with
    `complete_trials` below `trials` is not yet what the grid planned; the tables speak for what is there.
    """
    runs = with_methods(frame)
    if runs.empty:
        return pd.DataFrame()
    sampled = with_methods(frame, few_shot_dev=True)  # the probes' choices on their few-shot dev samples, where made
    sampled_probes = sampled[sampled.fusion == PROBE_FUSION] if not sampled.empty else sampled
    methods = [
        method for method in (*method_of_fusion().values(), *window_methods().values()) if method in set(runs.method)
    ]
    # the grid's own rates: the set of rates most often tried as a whole by a method on a backbone (each backbone's
    # methods counted apart). A rate past the grid's edge is a few methods' where they chose its largest, in sets of
    # their own (as is a method planned with more rates from the start), which a count of single rates would let
    # outvote the grid once enough of them share it; a method whose runs have only begun lacks some of the grid's
    # rates rather than shrinking the grid
    trained = [method for method in methods if method not in ENSEMBLE_METHODS.values()]  # ensembles train nothing
    tried = collections.Counter(
        frozenset(rates)
        for _, on_backbone in runs[runs.method.isin(trained)].groupby("backbone")
        for _, rates in on_backbone.groupby("method").learning_rate
    )
    shared_rates = set(max(tried, key=lambda rates: (tried[rates], -len(rates)))) if tried else set()
    alone_of = {method: alone for (_, alone), method in window_methods().items()}
    records = []
    for (backbone, dataset, epochs), on_backbone in runs.groupby(["backbone", "dataset", "epochs"]):
        depth = backbone_depth(on_backbone)
        trials = sorted(on_backbone.trial.unique())  # each backbone's grid its own (one may have run more trials)
        for n_shot in sorted(runs[runs.dataset == dataset].n_shot.unique()):
            setting = on_backbone[on_backbone.n_shot == n_shot]
            # the windows a window grid plans in each trial: around the layer its probe chose on dev and, where it
            # made one, around its choice on the few-shot dev sample (`around_chosen_layers`), each with the last
            # layer (False) and alone (True)
            probes = [setting[setting.fusion == PROBE_FUSION]]
            if not sampled_probes.empty:
                probes.append(
                    sampled_probes[
                        (sampled_probes.backbone == backbone)
                        & (sampled_probes.dataset == dataset)
                        & (sampled_probes.epochs == epochs)
                        & (sampled_probes.n_shot == n_shot)
                    ]
                )
            windows = {alone: {} for alone in (False, True)}
            for probe in probes:
                for trial, heads in probe.groupby("trial"):
                    for alone, window in probe_windows(heads).items():
                        if window is not None:
                            windows[alone].setdefault(trial, set()).add(window)
            for method in methods:
                rates = set(on_backbone[on_backbone.method == method].learning_rate) | shared_rates
                cells = (
                    1
                    if method not in trained  # one ensemble per trial
                    else len(rates) * (int(depth) if method == PROBE_METHOD else 1)
                )
                mine = setting[setting.method == method]
                if method in alone_of:  # planned where a window around the probe's choice is not every layer
                    planned_windows = windows[alone_of[method]]
                    if not planned_windows:
                        continue
                    mine = mine.loc[
                        [
                            layers in planned_windows.get(trial, ())
                            for trial, layers in zip(mine.trial, mine.fused_layers)
                        ]
                    ]
                    planned = {trial: cells * len(planned) for trial, planned in planned_windows.items()}
                else:
                    planned = dict.fromkeys(trials, cells)
                mine = mine[mine.trial.isin(planned)].drop_duplicates(
                    ["trial", "learning_rate", "layer", "fused_layers"]
                )
                per_trial = mine.groupby("trial").size()
                records.append(
                    {
                        "backbone": backbone,
                        "dataset": dataset,
                        "n_shot": n_shot,
                        "method": method,
                        "complete_trials": sum(
                            int(per_trial.get(trial, 0) >= needed) for trial, needed in planned.items()
                        ),
                        "trials": len(planned),
                        "runs": len(mine),
                        "planned_runs": sum(planned.values()),
                    }
                )
    return pd.DataFrame.from_records(records)


__all__ = ["coverage"]
