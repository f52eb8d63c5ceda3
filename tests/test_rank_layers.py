"""`dwatt rank-layers`: what it prints and writes, and what it refuses before loading anything."""

import json
import math

from dwatt.cli import main
from dwatt.layer_measures import MEASURES
from dwatt.layer_ranking import LayerRanking, measures_table


def test_the_command_prints_each_measure_by_layer_and_writes_its_values(tiny_backbone, tiny_conll, tmp_path, capsys):
    output = tmp_path / "ranked"
    code = main(
        ["rank-layers", "--backbone", str(tiny_backbone), "--data-dir", str(tiny_conll), "--texts", "9"]
        + ["--output", str(output), "--quiet"]
    )
    printed = capsys.readouterr().out
    assert code == 0
    record = json.loads((output / "rank_layers.json").read_text())
    assert record["texts"] == 9 and set(record["picks"]) == set(MEASURES)
    assert " pick | " in printed and "took" in printed
    assert measures_table(LayerRanking.from_json(record))[-1] in printed
    assert (output / "rank_layers.png").exists()
    assert all(value is None or math.isfinite(value) for value in record["measures"]["curvature"].values())


def test_the_command_refuses_a_missing_backbone_folder_and_too_few_texts(tmp_path, capsys):
    assert main(["rank-layers", "--backbone", str(tmp_path / "no-such"), "--output", str(tmp_path)]) == 2
    assert "no model folder" in capsys.readouterr().err
    assert main(["rank-layers", "--texts", "2", "--output", str(tmp_path)]) == 2
    assert "--texts 2" in capsys.readouterr().err
