"""Across settings (dwatt.experiment.across_settings): settings weighed alike by a random-effects meta-analysis, the
backbones a verdict rests on, and the sign test over trials beside it, on constructed rows."""

import math

import pytest

from dwatt.experiment.across_settings import (
    pooled_comparison,
    seed_clustered_effects,
    setting_effects,
    setting_weighted_comparison,
    setting_weighted_table,
)
from dwatt.experiment.selection import trial_differences
from dwatt.experiment.summaries import runs_frame

from .helpers import fair_row


def rows_of(settings: dict[tuple[str, int], list[float]]) -> list[dict]:
    """Per (backbone, N): a probe of 3 layers (layer 2 best on dev, test 0.60) and DWAtt `difference` F1 points from
    it in each trial."""
    rows = []
    for (backbone, n), differences in settings.items():
        for trial, difference in enumerate(differences):
            for layer in (1, 2, 3):
                rows.append(
                    fair_row("base", trial, 1e-3, 0.5 + 0.1 * (layer == 2), 0.6 - 0.1 * (layer != 2), layer, n=n)
                )
            rows.append(fair_row("dwatt", trial, 1e-3, 0.55, 0.6 + difference / 100, n=n))
        for row in rows[-4 * len(differences) :]:
            row["config"]["backbone"] = f"/m/{backbone}"
    return rows


def test_settings_weigh_alike_where_the_sign_test_counts_trials():
    """Ten trials ahead on one backbone outvote three behind on each of two others in the sign test (10 of 16,
    'level' there too), but each setting is one study to the meta-analysis: its mean is the settings' random-effects
    mean, nearer the two behind than the trials' mean is."""
    frame = runs_frame(
        rows_of(
            {
                ("big", 32): [2.0, 2.2, 1.8, 2.1, 1.9, 2.0, 2.3, 1.7, 2.0, 2.0],
                ("small", 32): [-1.0, -1.5, -0.5],
                ("tiny", 32): [-1.2, -0.8, -1.0],
            }
        )
    )
    weighted = setting_weighted_comparison(frame).set_index("method").loc["DWAtt"]
    pooled = pooled_comparison(frame).set_index("method").loc["DWAtt"]
    assert (weighted.settings, weighted.backbones) == (3, 3) and (pooled.ahead, pooled.behind) == (10, 6)
    trials_mean = (20.0 - 3.0 - 3.0) / 16
    assert weighted.mean_difference < trials_mean and pooled.mean_difference == pytest.approx(trials_mean)
    assert weighted.verdict == "level" and not weighted.rests_on


def test_random_effects_by_hand_and_the_backbone_a_lead_rests_on():
    """DerSimonian-Laird and Hartung-Knapp-Sidik-Jonkman computed by hand from the settings' means and variances
    agree with the table; a lead that three settings of one backbone carry rests on it."""
    from scipy import stats

    settings = {
        ("a", 16): [3.0, 2.0, 4.0],
        ("a", 32): [2.5, 3.5, 3.0],
        ("a", 64): [2.0, 3.0, 2.5],
        ("b", 32): [0.5, -0.5, 1.0],
    }
    frame = runs_frame(rows_of(settings))
    effects = setting_effects(trial_differences(frame)).query("method == 'DWAtt'")
    y = effects.effect.to_numpy()
    v = effects.variance.to_numpy()
    w = 1 / v
    fixed = (w * y).sum() / w.sum()
    q = (w * (y - fixed) ** 2).sum()
    tau2 = max(0.0, (q - (len(y) - 1)) / (w.sum() - (w**2).sum() / w.sum()))
    w_re = 1 / (v + tau2)
    mean = (w_re * y).sum() / w_re.sum()
    error = math.sqrt(max(1.0, (w_re * (y - mean) ** 2).sum() / (len(y) - 1)) / w_re.sum())
    p = 2 * stats.t.sf(abs(mean) / error, len(y) - 1)
    row = setting_weighted_comparison(frame).set_index("method").loc["DWAtt"]
    assert row.mean_difference == pytest.approx(mean) and row.tau2 == pytest.approx(tau2)
    assert row.p_value == pytest.approx(p) and row.ci95 == pytest.approx(stats.t.ppf(0.975, len(y) - 1) * error)
    assert row.verdict == "beats" and row.rests_on == "a"  # b alone: one setting, no test
    assert "| conll2003 | DWAtt | 4 | 2 |" in setting_weighted_table(setting_weighted_comparison(frame))


def test_a_setting_without_spread_borrows_the_method_s_median_and_one_trial_stays_out():
    frame = runs_frame(rows_of({("a", 16): [1.0, 1.0, 1.0], ("a", 32): [1.0, 2.0, 3.0], ("b", 32): [5.0]}))
    effects = setting_effects(trial_differences(frame)).query("method == 'DWAtt'").set_index(["backbone", "n_shot"])
    assert effects.loc[("a", 16)].variance == pytest.approx(1.0 / 3)  # the other setting's spread, 1.0, over 3 trials
    assert math.isnan(effects.loc[("b", 32)].variance)
    assert setting_weighted_comparison(frame).set_index("method").loc["DWAtt"].settings == 2


def test_a_lead_that_each_shared_sample_carries_once_is_not_shown():
    """Five backbones on the same three samples (seeds 0-2), each ahead on seeds 0 and 1 and behind on seed 2: as
    five independent settings the meta-analysis finds a lead, but the seeds, the independent units, are three, and a
    t-test over their means does not; the verdict is not shown either way, the random-effects one kept beside it."""
    frame = runs_frame(
        rows_of({(name, 32): [4.0 + k / 10, 4.2 - k / 10, -1.0 + k / 20] for k, name in enumerate("abcde")})
    )
    row = setting_weighted_comparison(frame).set_index("method").loc["DWAtt"]
    assert (row.settings, row.seeds) == (5, 3)
    assert row.random_effects_verdict == "beats" and row.p_holm < 0.05
    assert row.p_seeds_holm > 0.05 and row.verdict == "level" and not row.rests_on
    seeds = seed_clustered_effects(trial_differences(frame)).set_index("method").loc["DWAtt"]
    assert seeds.seed_mean == pytest.approx(row.seed_mean)
    assert "(3 seeds)" in setting_weighted_table(setting_weighted_comparison(frame))


def test_each_seed_weighs_the_settings_alike_so_a_setting_s_extra_trials_stay_out():
    """One backbone's ten trials behind and another's three ahead: seeds 3-9 hold the first backbone alone, so the
    seed test reads seeds 0-2 only, each the mean of both settings."""
    frame = runs_frame(rows_of({("a", 32): [-2.0 - k / 10 for k in range(10)], ("b", 32): [3.0, 3.5, 2.5]}))
    seeds = seed_clustered_effects(trial_differences(frame)).set_index("method").loc["DWAtt"]
    assert seeds.seeds == 3
    assert seeds.seed_mean == pytest.approx(((-2.0 + 3.0) + (-2.1 + 3.5) + (-2.2 + 2.5)) / 6)
