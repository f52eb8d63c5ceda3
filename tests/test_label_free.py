"""The agreement of label-free picks with the dev-chosen layer, on constructed curves whose answers are known, and
the report on a committed store."""

import json

import pandas as pd
import pytest

from dwatt.experiment.label_free import advice, agreement, measure_summary, pruning, read_rankings

DEV = [10.0, 30.0, 20.0, 5.0]  # layers 1..4: layer 2 reads best, the last worst


def curves(trials: int = 3) -> pd.DataFrame:
    rows = [
        {
            "backbone": "enc",
            "dataset": "conll2003",
            "n_shot": 32,
            "epochs": 25,
            "trial": trial,
            "layer": layer,
            "learning_rate": 1e-3,
            "dev_score": score + trial,
            "test_score": score + 2 * trial,
            "backbone_layers": 4.0,
        }
        for trial in range(trials)
        for layer, score in enumerate(DEV, start=1)
    ]
    return pd.DataFrame(rows)


def ranking() -> dict:
    measures = {
        "curvature": [0.95, 0.9, 0.1, 0.5, 1.0],  # lowest at layer 2: the dev curve's order exactly
        "prompt_entropy": [0.9, 0.8, 0.7, 0.6, 0.2],  # lowest at layer 4, the worst
        "dataset_entropy": [0.1, 0.1, 0.2, 0.3, 0.4],
        "effective_rank": [1.0, 2.0, 3.0, 4.0, 5.0],
        "intrinsic_dimension": [9.0, 4.0, 3.0, 2.0, None],  # a NaN layer is never picked
    }
    record = {
        "backbone": "models/enc",
        "dataset": "conll2003",
        "measures": {
            name: {str(layer): value for layer, value in enumerate(values)} for name, values in measures.items()
        },
    }
    return {("enc", "conll2003"): record}


def test_a_measure_that_orders_the_layers_as_dev_does_picks_its_layer_with_no_regret():
    table = agreement(curves(), ranking()).set_index("measure")
    straight = table.loc["curvature"]
    assert straight.pick == 2 and straight.hits == 3 and straight.within == 3
    assert straight.rho == pytest.approx(1.0)
    assert straight.regret == pytest.approx(0.0)
    assert straight.over_last == pytest.approx(25.0)  # 30 - 5 in every trial
    wrong = table.loc["prompt_entropy"]
    assert wrong.pick == 4 and wrong.hits == 0
    assert wrong.regret == pytest.approx(25.0) and wrong.rho == pytest.approx(-0.4)
    assert table.loc["intrinsic_dimension"].pick == 1
    assert straight.dev_layers == "2, 2, 2"
    last = table.loc["last_layer"]  # the reference: no measure
    assert last.pick == 4 and last.regret == pytest.approx(25.0) and last.over_last == pytest.approx(0.0)


def test_settings_without_a_ranking_are_left_out_and_the_advice_follows_the_summary():
    assert agreement(curves().assign(backbone="other"), ranking()).empty
    summary = measure_summary(agreement(curves(), ranking()))
    text = advice(summary)
    assert text.startswith("On CoNLL-03, the closest measure is curvature (median regret 0.00")
    assert (
        "in most trials: curvature (worst 0.00). The last layer, with no measure, is within 1 point in 0 of 3" in text
    )
    bad = summary[summary.measure != "curvature"]
    assert "none of them predicts the best layer" in advice(bad)


def test_the_probe_restricted_to_a_measures_top_layers_keeps_the_choice_when_they_hold_it():
    table = pruning(curves(), ranking(), "enc").set_index(["measure", "k"])
    kept = table.loc[("curvature", 3)]
    assert kept.layers == "1, 2, 3" and kept.same_layer == 3 and kept.loss == pytest.approx(0.0)
    assert kept.head_runs == pytest.approx(0.75) and kept.backbone_layers == pytest.approx(0.75)
    lost = table.loc[("prompt_entropy", 3)]  # layers 4, 3, 2: still holds layer 2
    assert lost.same_layer == 3
    assert table.loc[("effective_rank", 3)].layers == "2, 3, 4"


def test_rankings_are_read_from_the_folders_below(tmp_path):
    folder = tmp_path / "enc.conll2003"
    folder.mkdir()
    (folder / "rank_layers.json").write_text(json.dumps(ranking()["enc", "conll2003"]))
    assert list(read_rankings([tmp_path])) == [("enc", "conll2003")]


def test_two_rankings_of_one_backbone_and_dataset_are_refused(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rank_layers.json").write_text(json.dumps(ranking()["enc", "conll2003"]))
    with pytest.raises(ValueError, match=r"b/rank_layers\.json: a second ranking of enc on conll2003"):
        read_rankings([tmp_path])
