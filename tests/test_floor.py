"""The floor as methods of the fair report (dwatt.experiment.floor): the majority label and the model with no backbone,
scored once per sample, paired by trial with every backbone's runs of that sample."""

import json

import pandas as pd
import pytest

from dwatt.experiment.floor import floor_rows, read_floor, sample_key, scored_floor
from dwatt.experiment.report import write_report

from .helpers import fair_row


def floor_entry(row: dict, no_backbone_test: float, no_backbone_dev: float = 60.0) -> dict:
    return {
        "sample": sample_key(row["config"]) | {"seed": row["seed"]},
        "baselines": [
            {"name": "the majority label (O everywhere)", "dev": 0.0, "test": 0.0, "chosen": ""},
            {"name": "no backbone: a CRF", "dev": no_backbone_dev, "test": no_backbone_test, "chosen": "L2 0.1"},
        ],
    }


def grid_rows(backbone: str = "/m/deep") -> list[dict]:
    """Three trials of a 3-layer probe (layer 2 best on dev, test 0.60 + 0.01 x trial) and DWAtt (test 0.62 + ...)."""
    rows = []
    for trial in range(3):
        for layer in (1, 2, 3):
            rows.append(fair_row("base", trial, 1e-3, 0.5 + 0.1 * (layer == 2), 0.6 + 0.01 * trial, layer))
        rows.append(fair_row("dwatt", trial, 1e-3, 0.6, 0.62 + 0.01 * trial + 0.002 * (trial == 1)))
    for row in rows:
        row["config"]["backbone"] = backbone
    return rows


def test_each_backbone_and_budget_gets_the_floor_of_its_sample_once():
    rows = grid_rows() + grid_rows("/m/other")
    floor = [floor_entry(rows[4 * trial], 50.0 + trial) for trial in range(3)]
    made = floor_rows(rows, floor)
    assert len(made) == 2 * 2 * 3  # two baselines, two backbones, three trials
    mine = [row for row in made if row["config"]["backbone"] == "/m/other" and row["seed"] == 2]
    assert [row["config"]["fusion"] for row in mine] == ["majority_label", "no_backbone"]
    assert mine[1]["test_scores"] == {"f1": 0.52} and mine[1]["best_dev_f1"] == 0.6
    assert mine[1]["config"]["epochs"] == 25 and mine[1]["config"]["n_shot"] == 32


def test_a_sample_the_floor_lacks_is_named_with_its_store():
    rows = [row | {"_path": "fair.jsonl"} for row in grid_rows()]
    floor = [floor_entry(rows[0], 50.0)]  # trial 0 only
    with pytest.raises(ValueError, match=r"fair.jsonl: the floor has no scores of its sample .*\"seed\": 1"):
        floor_rows(rows, floor)


def test_a_floor_file_of_the_wrong_shape_is_refused_with_its_place(tmp_path):
    store = tmp_path / "floor.json"
    store.write_text('{"sample": {}}')
    with pytest.raises(ValueError, match="floor.json: a floor file is a list of samples, not dict"):
        read_floor(store)
    store.write_text('[{"sample": {}, "baselines": [{"dev": 1, "test": 2}]}]')
    with pytest.raises(ValueError, match="floor.json: entry 0 needs 2 baselines"):
        read_floor(store)
    store.write_text("[1, ")
    with pytest.raises(ValueError, match="floor.json: not a floor file"):
        read_floor(store)
    assert read_floor(tmp_path / "absent.json") == []


def test_only_the_samples_the_file_lacks_are_scored_and_each_is_kept_at_once(tmp_path, monkeypatch):
    from dwatt.experiment import baselines as module
    from dwatt.experiment.baselines import BaselineScores

    scored = []

    def fake(config):
        scored.append(config.seed)
        return [BaselineScores("majority", 0.0, 0.0), BaselineScores("no backbone", 55.0, 50.0 + config.seed)]

    monkeypatch.setattr(module, "baselines", fake)
    rows = grid_rows()
    store = tmp_path / "floor.json"
    store.write_text(json.dumps([floor_entry(rows[0], 50.0)]))
    floor = scored_floor(rows, store)
    assert scored == [1, 2] and len(floor) == 3 and json.loads(store.read_text()) == floor
    scored_floor(rows, store)
    assert scored == [1, 2]  # nothing left to score


def test_the_fair_tables_carry_the_floor_as_methods_paired_by_trial_and_corrected_apart(tmp_path):
    rows = grid_rows()
    store = tmp_path / "fair.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in rows))
    floor = tmp_path / "floor.json"
    # the no-backbone model 10 points under the best layer in every trial but one (so the difference has a spread)
    floor.write_text(json.dumps([floor_entry(rows[4 * t], 50.0 + t + 0.5 * (t == 2)) for t in range(3)]))
    write_report([store], tmp_path / "without", title="fair")
    write_report([store], tmp_path / "with", title="fair", floor=floor)
    tables = tmp_path / "with" / "tables"
    table = pd.read_csv(tables / "fair_comparison.csv").set_index("method")
    assert table.loc["no backbone"].test_score == pytest.approx((50 + 51 + 52.5) / 3)
    assert table.loc["no backbone"].minus_best_layer == pytest.approx((-10 - 10 - 9.5) / 3)
    assert table.loc["majority label"].test_score == 0
    # the fusions' correction is the same with the floor as without it: the floor is a family of its own
    without = pd.read_csv(tmp_path / "without" / "tables" / "fair_comparison.csv").set_index("method")
    assert table.loc["DWAtt"].p_holm == pytest.approx(without.loc["DWAtt"].p_holm)
    answer = (tables / "fair_answer.md").read_text()
    assert answer.splitlines()[0].endswith("| DWAtt | majority label | no backbone |")
    assert "the last layer's settings and the floor's corrected apart" in answer
    assert "The floor, on each trial's own sample and splits" in answer
    assert (
        "Against the floor: the best layer is ahead of a model with no backbone"
        in (tables / "fair_advice.md").read_text()
    )
    assert "The floor: majority label" in (tables / "fair_verdicts.md").read_text()
    assert "no backbone" not in (tables / "regret.md").read_text()  # its choice was made when it was scored
    assert "no backbone" not in (tables / "coverage.md").read_text()
    assert "no backbone" not in (tmp_path / "without" / "tables" / "fair_answer.md").read_text()


def test_the_floor_is_refused_for_a_report_that_is_no_fair_grid(tmp_path):
    row = fair_row("dwatt", 0, 1e-3, 0.6, 0.6)
    store = tmp_path / "results.jsonl"
    store.write_text(json.dumps(row) + "\n")
    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps([floor_entry(row, 50.0)]))
    with pytest.raises(ValueError, match="the floor .--floor. is a column of a fair grid's tables"):
        write_report([store], tmp_path / "out", floor=floor)
