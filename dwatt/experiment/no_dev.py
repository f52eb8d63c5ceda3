"""What a user with no dev set gets: the last layer and each fusion at `dwatt train`'s learning rate, each at its
last epoch, against the last layer (`no_dev_comparison`)."""

from __future__ import annotations

import pandas as pd

from ..run_config import default_learning_rate
from .methods import BEST_LAYER, LAST_LAYER, scores, window_methods, with_methods
from .selection import SAMPLE, candidates, paired_against, paired_columns
from .summaries import confidence_interval


def no_dev_comparison(frame: pd.DataFrame, learning_rate: float | None = None) -> pd.DataFrame:
    """
    What a user with no dev set gets, per backbone, dataset, N and method: with nothing to choose on, the head on the
    last layer and each fusion train at `dwatt train`'s FE learning rate for their task (or `learning_rate`) and keep
    their last
    epoch's weights; their test score (mean, 95% CI, trials) and the paired difference to the last layer's. From the
    runs that scored their last epoch (`--few-shot-dev`).
    """
    runs = with_methods(frame)
    if runs.empty:
        return pd.DataFrame()
    dev_scores = scores()
    runs = runs.assign(no_dev_score=[row[f"no_dev_test_{dev_scores[row.task][0]}"] for _, row in runs.iterrows()])
    rates = runs.task.map(lambda task: learning_rate or default_learning_rate("fe", task))
    runs = runs[runs.no_dev_score.notna() & (runs.learning_rate == rates)]
    # the methods' runs as `candidates` says (the best single layer needs a choice: no dev set, no such method)
    windows = set(window_methods().values())
    picks = [
        among.assign(method=method)
        for _, sample in runs.groupby(SAMPLE, dropna=False)
        for method, among in candidates(sample)
        if method != BEST_LAYER and method not in windows
    ]
    if not picks:
        return pd.DataFrame()
    records = []
    for (backbone, dataset, n_shot, epochs), setting in pd.concat(picks).groupby(
        ["backbone", "dataset", "n_shot", "epochs"]
    ):
        for method, mine, differences in paired_against(setting, LAST_LAYER, "no_dev_score"):
            records.append(
                {
                    "backbone": backbone,
                    "dataset": dataset,
                    "n_shot": n_shot,
                    "epochs": epochs,
                    "method": method,
                    "metric": mine.metric.iloc[0],
                    "learning_rate": mine.learning_rate.iloc[0],
                    "test_score": mine.no_dev_score.mean(),
                    "test_ci95": confidence_interval(mine.no_dev_score),
                    "trials": len(mine),
                    **paired_columns("minus_last_layer", differences, method == LAST_LAYER),
                }
            )
    return pd.DataFrame.from_records(records)


__all__ = ["no_dev_comparison"]
