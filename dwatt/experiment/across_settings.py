"""Each method against the best single layer across every setting (backbone, N) of a fair-comparison table.

Two tests, both Holm-corrected across a dataset's methods, the last layer's apart (`with_holm`, `significance`):
- `setting_weighted_comparison`, the one the answer and the advice follow: settings weighed alike, by a random-effects
  meta-analysis of each setting's mean paired difference (`significance.random_effects`), with a leave-one-backbone-out
  check that names the backbones a verdict rests on. The meta-analysis takes settings as independent, and they are
  not: a trial's seed draws the same sample for every backbone, and a smaller N's sample is the start of a larger
  one's (`sampling`). So a verdict stands only where it also holds with each sample counted once
  (`seed_clustered_effects`: each seed's mean difference over the settings that drew it, a t-test over the seeds);
- `pooled_comparison`, secondary: the sign test over every trial, so that a setting with 10 trials weighs more than one
  with 3.
"""

from __future__ import annotations

import math

import pandas as pd

from .methods import methods
from .selection import holm_family, trial_differences
from .significance import holm, random_effects, sign_test, verdict_of
from .table_text import markdown, with_interval

SETTING_KEYS = ["backbone", "n_shot", "epochs"]


def _in_table_order(table: pd.DataFrame) -> pd.DataFrame:
    order = {method: k for k, method in enumerate(methods())}
    return table.sort_values(
        ["dataset", "method"], key=lambda c: c.map(order) if c.name == "method" else c
    ).reset_index(drop=True)


def setting_effects(differences: pd.DataFrame) -> pd.DataFrame:
    """Per dataset, method and setting: the mean paired difference, the variance of that mean (the trials' sample
    variance over their count) and the trials. A setting whose trials all differ alike (no spread) borrows the median
    spread of the method's other settings; a setting of one trial, or a method with no spread anywhere, has no
    variance and is left out of the meta-analysis (`variance` NaN)."""
    rows = (
        differences.groupby(["dataset", "method", *SETTING_KEYS], sort=False)
        .difference.agg(effect="mean", spread="var", trials="count")
        .reset_index()
    )
    rows.loc[rows.trials < 2, "spread"] = math.nan
    for _, group in rows.groupby(["dataset", "method"], sort=False):
        positive = group.spread[group.spread > 1e-12]
        borrowed = positive.median() if not positive.empty else math.nan
        rows.loc[group.index[(group.spread <= 1e-12).to_numpy()], "spread"] = borrowed
    return rows.assign(variance=rows.spread / rows.trials).drop(columns="spread")


def seed_clustered_effects(differences: pd.DataFrame) -> pd.DataFrame:
    """Per dataset and method, each sample counted once: the settings that drew the same sample share its trial's
    seed (every backbone at a given N draws the same sentences, and a smaller N's covering sample is the start of a
    larger one's), so the seed, not the setting, is the independent unit. Over the seeds every setting of the method
    ran (so that each seed's mean weighs the same settings alike, as the meta-analysis does; a setting's extra trials
    stay out), each seed's mean difference over the settings, then a one-sample t-test over the seeds (`seeds`,
    `seed_mean`, `p_seeds`; NaN p for fewer than 2 seeds or no spread). Valid whatever the correlation between
    settings that share a sample."""
    from scipy import stats

    records = []
    for (dataset, method), rows in differences.groupby(["dataset", "method"], sort=False):
        seeds_of_each = [set(setting.trial) for _, setting in rows.groupby(SETTING_KEYS, sort=False)]
        shared = rows[rows.trial.isin(set.intersection(*seeds_of_each))]
        per_seed = shared.groupby("trial").difference.mean()
        spread = len(per_seed) >= 2 and per_seed.max() - per_seed.min() > 1e-12
        records.append(
            {
                "dataset": dataset,
                "method": method,
                "seeds": len(per_seed),
                "seed_mean": per_seed.mean(),
                "p_seeds": float(stats.ttest_1samp(per_seed, 0.0).pvalue) if spread else math.nan,
            }
        )
    return pd.DataFrame.from_records(records, columns=["dataset", "method", "seeds", "seed_mean", "p_seeds"])


def _weighted(effects: pd.DataFrame, differences: pd.DataFrame) -> pd.DataFrame:
    columns = ["dataset", "method", "settings", "backbones", "mean_difference", "ci95", "tau2", "p_value"]
    records = []
    for (dataset, method), group in effects.groupby(["dataset", "method"], sort=False):
        tested = group[group.variance.notna()]
        mean, ci95, p, tau2 = random_effects(list(tested.effect), list(tested.variance))
        records.append(
            {
                "dataset": dataset,
                "method": method,
                "settings": len(tested),
                "backbones": tested.backbone.nunique(),
                "mean_difference": mean,
                "ci95": ci95,
                "tau2": tau2,
                "p_value": p,
            }
        )
    table = with_holm(pd.DataFrame.from_records(records, columns=columns))
    clustered = seed_clustered_effects(differences)
    table = table.merge(clustered, on=["dataset", "method"], how="left")
    table["p_seeds_holm"] = holm_within_families(table, "p_seeds")
    table["random_effects_verdict"] = table.verdict
    seeds_verdict = [verdict_of(d, p) for d, p in zip(table.seed_mean, table.p_seeds_holm)]
    table["verdict"] = [
        own if own not in ("beats", "trails") or own == by_seeds else "level"
        for own, by_seeds in zip(table.verdict, seeds_verdict)
    ]
    return table


def holm_within_families(table: pd.DataFrame, column: str) -> pd.Series:
    """Holm's adjusted `column` over each dataset's methods, in the families its per-setting tests are corrected in
    (`selection.holm_family`: the last layer's and the floor's apart from the fusions')."""
    adjusted = pd.Series(math.nan, index=table.index)
    for _, family in table.groupby([table.dataset, table.method.map(holm_family)], sort=False):
        adjusted[family.index] = holm(list(family[column]))
    return adjusted


def with_holm(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with `p_holm` (`holm_within_families`) and `verdict`."""
    table["p_holm"] = holm_within_families(table, "p_value")
    table["verdict"] = [verdict_of(d, p) for d, p in zip(table.mean_difference, table.p_holm)]
    return table


def setting_weighted_comparison(frame: pd.DataFrame, few_shot_dev: bool = False) -> pd.DataFrame:
    """Per dataset and method, across its settings weighed alike: the random-effects mean difference from the best
    single layer with its 95% HKSJ interval, tau^2, p before and after Holm across the dataset's methods and its
    `random_effects_verdict`; the same with each sample counted once (`seed_clustered_effects`: `seeds`,
    `seed_mean`, `p_seeds`, `p_seeds_holm`); the `verdict`, ahead or behind only where both tests show it; and
    `rests_on`: the backbones without whose settings (the whole table recomputed without them, Holm again) an ahead
    or behind verdict would not stand."""
    differences = trial_differences(frame, few_shot_dev)
    if differences.empty:
        return pd.DataFrame()
    effects = setting_effects(differences)
    table = _weighted(effects, differences)
    table["rests_on"] = ""
    for backbone in sorted(effects.backbone.unique()):
        without = _weighted(
            effects[effects.backbone != backbone], differences[differences.backbone != backbone]
        ).set_index(["dataset", "method"])
        for index, row in table.iterrows():
            key = (row.dataset, row.method)
            if row.verdict in ("beats", "trails") and (
                key not in without.index or without.loc[key].verdict != row.verdict
            ):
                table.at[index, "rests_on"] = ", ".join(filter(None, [table.at[index, "rests_on"], backbone]))
    return _in_table_order(table)


def pooled_comparison(frame: pd.DataFrame, few_shot_dev: bool = False) -> pd.DataFrame:
    """Per dataset and method, across every setting (backbone, N) it ran in: the sign test of its trials' differences
    from the best single layer (`significance.sign_test`), Holm-corrected across the dataset's methods, and the mean
    difference; `verdict` as the per-setting ones are read (`significance.verdict_of`). Trials, not settings, are
    counted: the secondary test (`setting_weighted_comparison` weighs settings)."""
    differences = trial_differences(frame, few_shot_dev)
    if differences.empty:
        return pd.DataFrame()
    records = []
    for (dataset, method), rows in differences.groupby(["dataset", "method"], sort=False):
        ahead, behind, p = sign_test(list(rows.difference))
        records.append(
            {
                "dataset": dataset,
                "method": method,
                "settings": len(rows.groupby(["backbone", "n_shot"])),
                "trials": len(rows),
                "ahead": ahead,
                "behind": behind,
                "mean_difference": rows.difference.mean(),
                "p_value": p,
            }
        )
    return _in_table_order(with_holm(pd.DataFrame.from_records(records)))


def setting_weighted_table(weighted: pd.DataFrame) -> str:
    """`setting_weighted_comparison` as a pipe table."""
    if weighted.empty:
        return ""
    rows = weighted.assign(
        difference=[with_interval(m, c, sign=True) for m, c in zip(weighted.mean_difference, weighted.ci95)],
        tau=weighted.tau2.map(lambda t: "" if pd.isna(t) else f"{math.sqrt(t):.2f}"),
        p=weighted.p_value.map(lambda p: f"{p:.2g}"),
        holm=weighted.p_holm.map(lambda p: f"{p:.2g}"),
        seeds_holm=[f"{p:.2g} ({n:.0f} seeds)" for p, n in zip(weighted.p_seeds_holm, weighted.seeds)],
        rests=weighted.rests_on.map(lambda names: names or ("—")),
    )
    columns = {
        "difference": "difference (random effects, 95% HKSJ CI)",
        "tau": "τ (between settings)",
        "p": "p",
        "holm": "Holm p",
        "seeds_holm": "Holm p, each sample once",
        "rests": "verdict rests on",
    }
    return markdown(
        rows.rename(columns=columns),
        ["dataset", "method", "settings", "backbones", *list(columns.values())[:5], "verdict", columns["rests"]],
    )


def pooled_table(pooled: pd.DataFrame) -> str:
    """`pooled_comparison` as a pipe table: each method's trials ahead of and behind the best single layer over every
    setting, the sign test's p before and after Holm's correction across methods, and the verdict."""
    if pooled.empty:
        return ""
    rows = pooled.assign(
        mean=pooled.mean_difference.map(lambda d: f"{d:+.2f}"),
        p=pooled.p_value.map(lambda p: f"{p:.2g}"),
        holm=pooled.p_holm.map(lambda p: f"{p:.2g}"),
    )
    return markdown(
        rows.rename(columns={"mean": "mean difference", "p": "sign test p", "holm": "Holm p"}),
        [
            "dataset",
            "method",
            "settings",
            "trials",
            "ahead",
            "behind",
            "mean difference",
            "sign test p",
            "Holm p",
            "verdict",
        ],
    )


__all__ = [
    "pooled_comparison",
    "pooled_table",
    "seed_clustered_effects",
    "setting_effects",
    "setting_weighted_comparison",
    "setting_weighted_table",
]
