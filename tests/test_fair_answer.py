"""The fair comparison's answer (dwatt.experiment.fair_answer): its table, marked by the corrected verdicts, its rows
across settings, and the advice that follows them, on constructed tables."""

import math

import pandas as pd

from dwatt.experiment.fair_answer import fair_advice, fair_answer


def test_the_fair_answer_has_no_table_where_no_difference_has_an_interval():
    from dwatt.experiment.fair_answer import fair_answer

    table = pd.DataFrame(
        {
            "backbone": ["m"] * 4,
            "dataset": ["conll2003"] * 4,
            "n_shot": [32] * 4,
            "epochs": [25] * 4,
            "method": ["best single layer", "last layer", "DWAtt", "Concat"],
            "metric": ["F1"] * 4,
            "test_score": [60.0, 48.0, 61.0, 56.0],
            "trials": [1] * 4,
            "minus_best_layer": [math.nan, -12.0, 1.0, -4.0],
            "minus_best_layer_ci95": [math.nan] * 4,
        }
    )
    assert fair_answer(table) == ""  # one trial each: no answer yet
    assert fair_answer(table.assign(minus_best_layer_ci95=0.0)) == ""  # every trial the same difference: none either
    with_intervals = table.assign(minus_best_layer_ci95=[math.nan, 2.0, 3.0, 1.0], trials=3)
    lines = fair_answer(with_intervals).splitlines()  # a table without its tests: marked by the uncorrected CIs
    assert lines[2] == "| m, N = 32 (3 trials) | 60.00 | -12.00 ± 2.00 ▼ | -4.00 ± 1.00 ▼ | +1.00 ± 3.00 |"
    assert fair_answer(with_intervals.assign(dataset="wikiann:sw")).splitlines()[-1].startswith("wikiann:sw test F1")
    one_concat = with_intervals.assign(trials=[3, 3, 3, 1], minus_best_layer_ci95=[math.nan, 2.0, 3.0, math.nan])
    assert fair_answer(one_concat).splitlines()[2].endswith("| -4.00 (1 trial) | +1.00 ± 3.00 |")  # paired on its one


def across_row(method, mean, ci95, settings, verdict, rests_on=""):
    return {
        "dataset": "conll2003",
        "method": method,
        "settings": settings,
        "backbones": settings,
        "mean_difference": mean,
        "ci95": ci95,
        "tau2": 0.5,
        "p_value": 0.01,
        "p_holm": 0.02,
        "verdict": verdict,
        "rests_on": rests_on,
    }


def two_settings() -> pd.DataFrame:
    rows = []
    for backbone in ("a", "b"):
        for method, score, minus, ci in (
            ("best single layer", 60.0, math.nan, math.nan),
            ("last layer", 50.0, -10.0, 2.0),
            ("top-3 layers averaged", 62.0, 2.0, 1.0),
            ("ScalarMix", 59.0, -1.0, 3.0),
        ):
            rows.append(
                {
                    "backbone": backbone,
                    "dataset": "conll2003",
                    "n_shot": 32,
                    "epochs": 25,
                    "method": method,
                    "metric": "F1",
                    "test_score": score,
                    "trials": 3,
                    "minus_best_layer": minus,
                    "minus_best_layer_ci95": ci,
                }
            )
    return pd.DataFrame(rows)


def test_the_answer_s_row_across_settings_and_the_advice_follow_the_setting_weighted_test():
    """The row of settings weighed alike carries each method's random-effects difference, mark and settings; the
    advice recommends the ensemble only where that test puts it ahead, and names the backbone its lead rests on."""
    table = two_settings()
    across = pd.DataFrame(
        [
            across_row("last layer", -10.0, 1.5, 2, "trails"),
            across_row("top-3 layers averaged", 2.0, 0.8, 2, "beats", rests_on="a"),
            across_row("ScalarMix", -1.0, 4.0, 2, "level"),
        ]
    )
    lines = fair_answer(table, across).splitlines()
    assert lines[4] == (
        "| every setting, weighed alike (random effects; settings) |  | -10.00 ± 1.50 ▼ (2) | +2.00 ± 0.80 ▲ (2) | "
        "-1.00 ± 4.00 (2) |"
    )
    advice = fair_advice(table, across)
    assert "the last layer trails it in every setting above" in advice
    assert "ahead of it across settings weighed alike (+2.00 ± 0.80 over 2 settings, Holm p = 0.02; it rests on a" in (
        advice
    )
    assert "`dwatt probe --save-ensemble 3`" in advice
    level = across.assign(verdict=["trails", "level", "level"], rests_on="")
    assert "is ahead only in the settings marked ▲, not across settings weighed alike" in fair_advice(table, level)
    assert "No fusion of every layer (ScalarMix) is shown ahead" in fair_advice(table, level)
