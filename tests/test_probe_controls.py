"""The probe's controls (dwatt.experiment.probe_controls): the shuffled-label control's line says its scores and the
chosen head's margin over it, a control run has an id and a folder of its own, and reports leave controls out (the
probe's end-to-end test, in test_experiment_probe.py, trains one)."""

import json

from dwatt.experiment.grid import RunSpec
from dwatt.experiment.probe_controls import shuffled_label_lines
from dwatt.experiment.summaries import load_rows

from .helpers import ner_row


def test_the_control_line_says_the_shuffled_heads_mean_scores_and_the_chosen_heads_margin_on_dev():
    shuffled = {0: {"dev": 10.0, "test": 8.0}, 1: {"dev": 20.0, "test": 12.0}}
    (line,) = shuffled_label_lines(shuffled, (3, 0.01), 42.5, "F1")
    assert line.startswith(
        "control: layer 3's head at 0.01 trained on shuffled labels: dev F1 15.00, test F1 10.00; the chosen head "
        "scores +27.50 F1 above it on dev"
    )
    assert shuffled_label_lines({}, (3, 0.01), 42.5, "F1") == []
    (without_test,) = shuffled_label_lines({0: {"dev": 50.0, "test": None}}, (1, 0.1), 40.0, "accuracy")
    assert "dev accuracy 50.00; the chosen head scores -10.00 accuracy" in without_test


def test_a_control_run_has_an_id_and_folder_of_its_own_and_reports_leave_it_out(tmp_path):
    spec = RunSpec("base", "fe", 4, 2, 0, layers="2", learning_rate=0.01)
    control = RunSpec("base", "fe", 4, 2, 0, layers="2", learning_rate=0.01, shuffle_labels=True)
    assert control.run_id == spec.run_id + "/shuffled-labels" and control.budget_group != spec.budget_group
    assert control.run_config(tmp_path).shuffle_labels and not spec.run_config(tmp_path).shuffle_labels
    assert control.run_config(tmp_path).output_dir != spec.run_config(tmp_path).output_dir
    store = tmp_path / "probe.jsonl"
    method = ner_row("base", 4, 2, 0, 0.5) | {"run_id": spec.run_id}
    shuffled = ner_row("base", 4, 2, 0, 0.1) | {"run_id": control.run_id}
    shuffled["config"]["shuffle_labels"] = True
    store.write_text(json.dumps(method) + "\n" + json.dumps(shuffled) + "\n")
    assert [row["run_id"] for row in load_rows([store])] == [spec.run_id]
