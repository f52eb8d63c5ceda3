"""What the fair comparison's differences can be said to show, with the corrections stated.

- Per setting (backbone, dataset, N): each method's paired differences from the best single layer, trial by trial,
  tested two-sided with Student's t (`paired_p_value`, the test behind the 95% CIs the tables print). The
  p-values of one table's method-setting pairs are corrected together for multiple comparisons by Holm's step-down
  method (`holm`, statsmodels'): a method "beats" or "trails" the best single layer only where its corrected p is below 0.05.
- Across settings: one pooled test per method (`across_settings.pooled_comparison`), a two-sided sign test over every trial of every
  setting of a table (ahead against behind; exact ties left out), its p-values corrected by Holm across methods.
- Across settings, settings weighed alike (`random_effects`): each setting's mean paired difference and its
  variance, combined by a random-effects meta-analysis (DerSimonian-Laird between-setting variance) with the
  Hartung-Knapp-Sidik-Jonkman interval and t-test on k - 1 degrees of freedom (careful with few settings; with the ad
  hoc rule that keeps it no narrower than the plain random-effects interval), Holm across methods. The sign test above counts trials, so settings with more trials weigh more; this one does not.
- Ties on dev: where several runs of a method share the best dev score, the method's test score is the mean of theirs
  (`selection.chosen_on_dev`); whether a verdict holds over every way of breaking them is `tie_robust`.

Torch-free: the report reads it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

ALPHA = 0.05
# Past this many ways of breaking a setting's ties, only the two extremes (each trial's lowest and highest
# difference) are tried.
TIE_COMBINATIONS = 4096


def paired_p_value(differences: Sequence[float]) -> float:
    """Two-sided p of Student's one-sample t-test that the mean paired difference is 0; NaN for fewer than 2 trials
    or no spread (a difference the same in every trial says nothing of how it varies)."""
    from scipy import stats

    values = [value for value in differences if not math.isnan(value)]
    if len(values) < 2 or max(values) - min(values) < 1e-12:
        return math.nan
    return float(stats.ttest_1samp(values, 0.0).pvalue)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (statsmodels' `multipletests`), in the order given; NaN stays NaN, outside
    the family."""
    from statsmodels.stats.multitest import multipletests

    family = [i for i, p in enumerate(p_values) if not math.isnan(p)]
    adjusted = [math.nan] * len(p_values)
    if family:
        _, corrected, _, _ = multipletests([p_values[i] for i in family], alpha=ALPHA, method="holm")
        for i, p in zip(family, corrected):
            adjusted[i] = float(p)
    return adjusted


def sign_test(differences: Sequence[float]) -> tuple[int, int, float]:
    """(ahead, behind, two-sided p) of the sign test of paired differences; exact ties (|d| < 1e-9) left out."""
    from scipy import stats

    ahead = sum(1 for value in differences if value > 1e-9)
    behind = sum(1 for value in differences if value < -1e-9)
    if ahead + behind == 0:
        return 0, 0, math.nan
    return ahead, behind, float(stats.binomtest(ahead, ahead + behind, 0.5).pvalue)


def random_effects(effects: Sequence[float], variances: Sequence[float]) -> tuple[float, float, float, float]:
    """(mean, 95% CI half-width, two-sided p, tau^2) of a random-effects meta-analysis of per-setting `effects` with
    the `variances` of their means: DerSimonian and Laird's between-setting variance, truncated at 0 as they define it
    (statsmodels' `combine_effects(method_re="dl")` leaves it negative, which overweights every setting), and the
    Hartung-Knapp-Sidik-Jonkman standard error, never below the plain random-effects one (Knapp and Hartung's ad hoc
    rule), with Student's t on k - 1 degrees of freedom. NaN interval and p for fewer than 2 settings."""
    from scipy import stats

    y, v = np.asarray(effects, float), np.asarray(variances, float)
    if len(y) < 2:
        return (float(y[0]) if len(y) else math.nan), math.nan, math.nan, math.nan
    w = 1 / v
    fixed = (w * y).sum() / w.sum()
    q = (w * (y - fixed) ** 2).sum()
    tau2 = max(0.0, float((q - (len(y) - 1)) / (w.sum() - (w**2).sum() / w.sum())))
    w_re = 1 / (v + tau2)
    mean = float((w_re * y).sum() / w_re.sum())
    freedom = len(y) - 1
    # HKSJ scales the random-effects variance by q; q < 1 (settings that agree more than their own variances say)
    # would make the interval narrower than the plain random-effects one: Knapp and Hartung's ad hoc rule keeps q >= 1.
    q_scale = max(1.0, float((w_re * (y - mean) ** 2).sum()) / freedom)
    error = math.sqrt(q_scale / float(w_re.sum()))
    if not error > 0:
        return mean, math.nan, math.nan, tau2
    p = float(2 * stats.t.sf(abs(mean) / error, freedom))
    return mean, float(stats.t.ppf(1 - ALPHA / 2, freedom) * error), p, tau2


def verdict_of(difference: float, adjusted_p: float, adjusted_equivalence_p: float = math.nan) -> str:
    """`beats` or `trails` where the corrected p of the difference test is below `ALPHA` (in the direction of the mean
    difference); else `within` where the corrected p of the equivalence test (`equivalence_p_value`) is; else `level`:
    neither shown. `no interval` where there is no test (one trial, or no spread)."""
    if math.isnan(adjusted_p):
        return "no interval"
    if adjusted_p < ALPHA:
        return "beats" if difference > 0 else "trails"
    if not math.isnan(adjusted_equivalence_p) and adjusted_equivalence_p < ALPHA:
        return "within"
    return "level"


# The margin of the equivalence test, in the score's points (F1 or accuracy): a difference shown inside ±1 point is
# "within" (`verdict_of`); the order of the rerun noise (docs/results/rerun-noise), and the smallest gain a user of a
# few-shot tagger would act on.
EQUIVALENCE_MARGIN = 1.0


def equivalence_p_value(differences: Sequence[float], margin: float) -> float:
    """p of two one-sided t-tests (TOST, Schuirmann 1987) that the mean paired difference lies within ±`margin`:
    the larger of the p of "mean > -margin" and of "mean < +margin"; NaN for fewer than 2 trials or no spread."""
    from scipy import stats

    values = [value for value in differences if not math.isnan(value)]
    if len(values) < 2 or max(values) - min(values) < 1e-12:
        return math.nan
    above = stats.ttest_1samp(values, -margin, alternative="greater").pvalue
    below = stats.ttest_1samp(values, margin, alternative="less").pvalue
    return float(max(above, below))


def tie_robust(trial_choices: Sequence[Sequence[float]], others: Sequence[float], index: int) -> bool:
    """Whether the Holm verdict of pair `index` of a family is the same for every way of breaking its ties:
    `trial_choices` holds, per trial, every paired difference a choice among tied runs could give (one where there is
    no tie); `others` the family's p-values (this pair's own is recomputed for each way). Past `TIE_COMBINATIONS`
    ways, each trial's lowest and highest difference only."""
    options = [sorted(set(choices)) for choices in trial_choices]
    count = math.prod(len(choice) for choice in options)
    ways = (
        itertools.product(*options)
        if count <= TIE_COMBINATIONS
        else [tuple(choice[0] for choice in options), tuple(choice[-1] for choice in options)]
    )
    seen = set()
    for way in ways:
        family = list(others)
        family[index] = paired_p_value(way)
        seen.add(verdict_of(sum(way) / len(way), holm(family)[index]))
        if len(seen) > 1:
            return False
    return True


__all__ = [
    "ALPHA",
    "EQUIVALENCE_MARGIN",
    "TIE_COMBINATIONS",
    "equivalence_p_value",
    "holm",
    "paired_p_value",
    "sign_test",
    "tie_robust",
    "verdict_of",
]
