"""What the differences can be said to show (dwatt.experiment.significance, through selection and the report): Holm's
correction of the per-setting tests, the pooled sign test across settings, and the tie rule, on constructed rows."""

import json
import math

import pandas as pd
import pytest

from dwatt.experiment.across_settings import pooled_comparison
from dwatt.experiment.selection import fair_comparison
from dwatt.experiment.significance import holm, paired_p_value, sign_test, tie_robust, verdict_of
from dwatt.experiment.summaries import runs_frame

from .helpers import fair_row


def test_holm_adjusts_in_steps_and_keeps_the_order_given():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    adjusted = holm([0.2, math.nan, 0.001])
    assert adjusted[0] == pytest.approx(0.2) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.002)
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # never above 1, never below an earlier step


def test_the_sign_test_and_the_paired_test():
    ahead, behind, p = sign_test([1.0] * 16 + [-1.0] * 2 + [0.0])  # an exact tie is left out
    assert (ahead, behind) == (16, 2) and p == pytest.approx(0.001312, rel=1e-3)
    assert math.isnan(paired_p_value([1.5, 1.5, 1.5]))  # no spread: no test
    assert paired_p_value([1.0, 2.0, 3.0]) == pytest.approx(0.0742, rel=1e-2)
    assert verdict_of(2.0, 0.01) == "beats" and verdict_of(-2.0, 0.01) == "trails" and verdict_of(2.0, 0.2) == "level"


def rows_of(settings: dict[int, list[float]]) -> list[dict]:
    """A probe of 3 layers (layer 2 best on dev, test 0.60) and DWAtt `difference` F1 points from it in each trial,
    per N."""
    rows = []
    for n, differences in settings.items():
        for trial, difference in enumerate(differences):
            for layer in (1, 2, 3):
                rows.append(
                    fair_row("base", trial, 1e-3, 0.5 + 0.1 * (layer == 2), 0.6 - 0.1 * (layer != 2), layer, n=n)
                )
            rows.append(fair_row("dwatt", trial, 1e-3, 0.55, 0.6 + difference / 100, n=n))
    return rows


def test_a_setting_s_beat_must_survive_holm_and_the_pooled_test_counts_every_trial():
    """One setting's DWAtt is ahead with p < 0.05 alone, but not once corrected with the last layer's apart and the
    other setting's pair; across both settings its 8 of 8 trials ahead make the sign test's verdict."""
    frame = runs_frame(rows_of({32: [1.0, 1.2, 0.9, 1.1], 128: [0.5, 2.0, 0.1, 1.5]}))
    table = fair_comparison(frame).set_index(["n_shot", "method"])
    first, second = table.loc[(32, "DWAtt")], table.loc[(128, "DWAtt")]
    assert first.p_value < 0.05 and second.p_value > first.p_value
    assert first.p_holm == pytest.approx(min(1.0, 2 * first.p_value))  # two pairs in the family
    assert first.verdict == ("beats" if 2 * first.p_value < 0.05 else "level")
    pooled = pooled_comparison(frame).set_index("method")
    assert pooled.loc["DWAtt"].ahead == 8 and pooled.loc["DWAtt"].behind == 0
    assert pooled.loc["DWAtt"].p_value == pytest.approx(2 / 2**8)


def test_ties_on_dev_average_the_tied_runs_test_scores_whatever_order_the_rows_come_in():
    """Two DWAtt rates tie on dev (test 0.62 and 0.66): the method scores their mean, 0.64, in any file order, with the
    first in grid order (the smaller rate) standing for the choice; whether the verdict holds over every way of
    breaking the tie is said."""
    rows = []
    for trial in range(3):
        for layer in (1, 2, 3):
            rows.append(
                fair_row("base", trial, 1e-3, 0.5 + 0.1 * (layer == 2), 0.6 + 0.002 * trial * (layer == 2), layer)
            )
        rows.append(fair_row("dwatt", trial, 1e-2, 0.7, 0.66))
        rows.append(fair_row("dwatt", trial, 1e-3, 0.7, 0.62))
    scores = []
    for ordered in (rows, rows[::-1]):
        table = fair_comparison(runs_frame(ordered)).set_index("method")
        scores.append(table.loc["DWAtt"].test_score)
        assert table.loc["DWAtt"].learning_rates == "0.001, 0.001, 0.001" and table.loc["DWAtt"].tied_trials == 3
    assert scores[0] == pytest.approx(64.0) and scores[1] == pytest.approx(64.0)


def test_a_verdict_that_depends_on_the_tie_is_not_robust():
    # per trial, the differences a choice among tied runs could give: far apart in trial 0
    assert not tie_robust([[3.0, -3.0], [3.1], [2.9]], [0.01, math.nan], 0)
    assert tie_robust([[1.0, 1.05], [1.0], [1.1]], [math.nan], 0)


def test_the_answer_is_a_table_marked_by_the_corrected_verdicts(tmp_path):
    from dwatt.experiment.report import write_report

    store = tmp_path / "fair.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in rows_of({32: [3.0, 3.1, 2.9, 3.05, 2.95]})))
    write_report([store], tmp_path / "out", title="fair")
    answer = (tmp_path / "out" / "tables" / "fair_answer.md").read_text()
    lines = answer.splitlines()
    assert lines[0].startswith("| setting | best single layer | last layer |") and "DWAtt" in lines[0]
    assert lines[2].startswith("| deep, N = 32 (5 trials) | 60.00 |") and "+3.00 ± " in lines[2] and "▲" in lines[2]
    assert "Holm's correction" in answer and "5 of 5 ahead" in answer
    pooled = pd.read_csv(tmp_path / "out" / "tables" / "pooled.csv").set_index("method")
    assert pooled.loc["DWAtt"].ahead == 5


def test_random_effects_agree_with_statsmodels_and_truncate_tau2_at_zero():
    """Where DerSimonian-Laird's tau^2 is positive, statsmodels' `combine_effects` gives the same mean and HKSJ
    interval; where settings agree more than their variances say, tau^2 is 0 (statsmodels leaves it negative), and
    the mean is the fixed-effect one."""
    import numpy as np
    from statsmodels.stats.meta_analysis import combine_effects

    from dwatt.experiment.significance import random_effects

    effects, variances = [1.0, 2.0, 0.5, 3.0], [0.5, 0.3, 0.8, 0.4]
    mean, ci95, p, tau2 = random_effects(effects, variances)
    theirs = combine_effects(np.array(effects), np.array(variances), method_re="dl", use_t=True)
    low, high = theirs.conf_int(use_t=True)[3]  # the random-effects interval with the HKSJ scale
    assert theirs.scale_hksj_re >= 1  # where the ad hoc rule changes nothing
    assert tau2 > 0 and tau2 == pytest.approx(theirs.tau2) and mean == pytest.approx(theirs.mean_effect_re)
    assert (mean - ci95, mean + ci95) == pytest.approx((low, high)) and 0 < p < 0.05
    mean, ci95, p, tau2 = random_effects([1.0, 1.1, 0.9], [1.0, 2.0, 4.0])
    assert tau2 == 0 and mean == pytest.approx((1.0 + 1.1 / 2 + 0.9 / 4) / (1 + 1 / 2 + 1 / 4))
    assert math.isnan(random_effects([2.0], [1.0])[1])
    # settings that agree more than their variances say: the interval stays the plain random-effects one, not 0
    mean, ci95, p, tau2 = random_effects([1.0, 1.0], [1.0, 1.0])
    assert ci95 == pytest.approx(12.706 * math.sqrt(1 / 2), rel=1e-4) and p > 0.05


def test_two_one_sided_tests_put_a_tight_small_difference_within_the_margin_and_a_loose_one_not():
    from dwatt.experiment.significance import equivalence_p_value

    tight, loose = [0.1, -0.2, 0.05, 0.15], [3.0, -2.5, 0.4]
    assert equivalence_p_value(tight, 1.0) < 0.05 < equivalence_p_value(loose, 1.0)
    assert math.isnan(equivalence_p_value([0.3], 1.0)) and math.isnan(equivalence_p_value([0.3, 0.3], 1.0))
    # against scipy's one-sided tests, by hand: the larger of the two p-values
    from scipy import stats

    expected = max(
        stats.ttest_1samp(tight, -1.0, alternative="greater").pvalue,
        stats.ttest_1samp(tight, 1.0, alternative="less").pvalue,
    )
    assert equivalence_p_value(tight, 1.0) == pytest.approx(expected)
    assert verdict_of(2.0, 0.01, 0.9) == "beats" and verdict_of(-2.0, 0.01, 0.9) == "trails"
    assert verdict_of(0.1, 0.6, 0.01) == "within" and verdict_of(0.1, 0.6, 0.2) == "level"
    assert verdict_of(0.1, math.nan, math.nan) == "no interval" and verdict_of(0.1, 0.6) == "level"
