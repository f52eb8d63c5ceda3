"""One record per task and per fusion: a fusion and a task that only this test declares (a spec and a module, a task
record of a kind dwatt knows) are trained, stored, tabled and drawn, with no edit anywhere else."""

from dataclasses import replace

import pandas as pd
import pytest
import torch
from torch import nn

import fusions_dwatt
import specs_dwatt
from dwatt import tasks
from dwatt.experiment.figures import figure_probe
from dwatt.experiment.grid import grid
from dwatt.experiment.report import write_report
from dwatt.experiment.store import ResultsStore
from dwatt.experiment.summaries import runs_frame
from dwatt.experiment.sweep import run_sweep
from dwatt.training import EXECUTION

TOY_COLOR = "#17becf"


class LayerMean(fusions_dwatt.LayerFusion):
    """h = gamma * mean_n z_n: the fused layers averaged, one learned scale."""

    spec = specs_dwatt.FusionSpec("layer_mean", "LayerMean", color=TOY_COLOR, table_rank=7)

    def __init__(self, config, backbone=None):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(1))

    def init_weights(self, std: float) -> None:
        nn.init.ones_(self.gamma)

    def forward(self, layers, last_layer, layer_inputs=None):
        return self.gamma * layers.mean(dim=1), None


# A tagging task of its own: the NER record's facts under another name, with its own batch size, rate and example.
TOY_TASK = replace(
    tasks.TASKS["ner"], name="toy_tags", batch_size=8, fe_learning_rate=5e-3, example_input="peter visited brussels"
)


@pytest.fixture
def declared(monkeypatch):
    """The toy fusion and task declared for this test alone: one spec and one class, one task record."""
    monkeypatch.setitem(specs_dwatt.FUSION_SPECS, "layer_mean", LayerMean.spec)
    monkeypatch.setitem(fusions_dwatt.FUSION_CLASSES, "layer_mean", LayerMean)
    monkeypatch.setitem(tasks.TASKS, TOY_TASK.name, TOY_TASK)


def test_a_fusion_and_a_task_declared_in_a_test_alone_are_trained_stored_tabled_and_drawn(
    declared, tiny_backbone, tiny_conll, tmp_path
):
    specs = grid(
        ["layer_mean", "base"],
        n_shots=(2,),
        epochs=(3,),
        trials=2,
        backbones=(str(tiny_backbone),),
        data_dir=str(tiny_conll),
        task=TOY_TASK.name,
        learning_rates=(1e-3, 1e-2),
        probe_layers="all",
    )
    store = tmp_path / "fair.jsonl"
    run_sweep(specs, store, tmp_path / "runs", execution=EXECUTION, progress=False, evaluate_test=True, batch_size=8)

    rows = ResultsStore(store).rows()
    assert {row["task"] for row in rows} == {TOY_TASK.name}  # the run says what it trained
    assert sum(row["config"]["fusion"] == "layer_mean" for row in rows) == 4  # 2 trials x 2 rates
    report = write_report([store], tmp_path / "report", title="toy")
    fair = pd.read_csv(tmp_path / "report" / "tables" / "fair_comparison.csv").set_index("method")
    assert fair.loc["LayerMean"].trials == 2  # named as its spec names it
    answer = (tmp_path / "report" / "tables" / "fair_answer.md").read_text().splitlines()
    assert answer[0].split(" | ")[-1] == "LayerMean |"  # its spec's rank puts it after every fusion of dwatt's
    assert "LayerMean" in report.read_text()

    figure = figure_probe(runs_frame(rows))
    drawn = {line.get_label(): line.get_color() for line in figure.axes[0].get_lines()}
    assert drawn["LayerMean"] == TOY_COLOR  # in its spec's colour
