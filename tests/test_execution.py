"""`dwatt.execution.Execution`: the sweeps and the probe train their runs through the execution they are handed (the
command line hands them `dwatt.training.EXECUTION`), one run alone or a group together, in parts where asked."""

from dataclasses import asdict

import dwatt.training
from dwatt.execution import Execution, ExecutionOf
from dwatt.experiment.grid import grid
from dwatt.experiment.sweep import run_sweep


class Calls(list):
    """The calls a recording execution saw, and (`ensembles`) whether each group was to build probe ensembles."""

    def __init__(self):
        super().__init__()
        self.ensembles = []


def recording_execution(calls: Calls) -> Execution:
    def alone(config):
        calls.append(("alone", config.epochs))
        return {"best_dev_f1": 0.1, "config": asdict(config)}

    def together(configs, train_in_parts=None, build_ensembles=True):
        calls.append(("together", sorted(config.epochs for config in configs), train_in_parts))
        calls.ensembles.append(build_ensembles)
        return [{"best_dev_f1": 0.2, "engine": "stacked", "config": asdict(config)} for config in configs]

    return ExecutionOf(alone=alone, together=together)


def test_a_sweep_trains_each_group_through_the_way_its_engine_names(tmp_path):
    specs = grid(fusions=("dwatt",), n_shots=(1,), epochs=(1, 2), trials=1)
    calls = Calls()
    run_sweep(specs, tmp_path / "one.jsonl", execution=recording_execution(calls), progress=False, engine="trainer")
    assert sorted(calls) == [("alone", 1), ("alone", 2)]
    calls.clear()
    rows = run_sweep(
        specs,
        tmp_path / "together.jsonl",
        execution=recording_execution(calls),
        progress=False,
        engine="stacked",
        train_in_parts=1,
    )
    assert calls == [("together", [1, 2], 1)] and [row["best_dev_f1"] for row in rows] == [0.2, 0.2]


def test_the_command_line_sweeps_through_the_training_execution(tmp_path, monkeypatch):
    """`dwatt sweep` takes `dwatt.training.EXECUTION` when it trains (not before: a sweep refused for its options
    imports no training), so the one object decides how the command line's runs train."""
    from dwatt.cli import main

    calls = Calls()
    monkeypatch.setattr(dwatt.training, "EXECUTION", recording_execution(calls))
    store = tmp_path / "r.jsonl"
    arguments = ["sweep", "--fusions", "dwatt", "--n-shots", "1", "--epochs", "1,2", "--trials", "1", "--quiet"]
    assert main([*arguments, "--engine", "budgets", "--results", str(store)]) == 0
    assert calls == [("together", [1, 2], None)]
    assert len(store.read_text().splitlines()) == 2


def test_a_group_trained_in_part_builds_no_probe_ensembles(tmp_path):
    """A probe's ensembles rank the heads of its whole grid: a group whose other runs a store already holds (here a
    `done_in` store), or one the caller marks as part of a grid (a widening's added rates), builds none."""
    specs = grid(
        fusions=("base",), n_shots=(1,), epochs=(1,), trials=1, learning_rates=(1e-3, 1e-2), probe_layers="all"
    )
    calls = Calls()
    whole = tmp_path / "whole.jsonl"
    run_sweep(specs, whole, execution=recording_execution(calls), progress=False, engine="stacked")
    assert calls.ensembles == [True] and len(calls) == 1
    held = [line for line in whole.read_text().splitlines() if "lr0.001/" in line]
    (tmp_path / "part.jsonl").write_text("\n".join(held) + "\n")
    run_sweep(
        specs,
        tmp_path / "rest.jsonl",
        execution=recording_execution(calls),
        progress=False,
        engine="stacked",
        done_in=(tmp_path / "part.jsonl",),
    )
    assert calls.ensembles == [True, False]
    run_sweep(
        specs,
        tmp_path / "widened.jsonl",
        execution=recording_execution(calls),
        progress=False,
        engine="stacked",
        build_ensembles=False,
    )
    assert calls.ensembles == [True, False, False]


def test_the_command_line_s_widening_rounds_build_no_probe_ensembles(tmp_path, monkeypatch):
    """`dwatt sweep --widen`: the grid's groups build the probe's ensembles, the rounds of added rates do not (every
    rate ties on dev here, so the smallest is chosen and one rate below it is added)."""
    from dwatt.cli import main

    calls = Calls()
    monkeypatch.setattr(dwatt.training, "EXECUTION", recording_execution(calls))
    arguments = ["sweep", "--fusions", "base", "--learning-rates", "1e-4,1e-3", "--n-shots", "1", "--epochs", "1"]
    store = tmp_path / "r.jsonl"
    options = ["--trials", "1", "--engine", "stacked", "--widen", "1", "--quiet", "--results", str(store)]
    assert main([*arguments, *options]) == 0
    assert len(store.read_text().splitlines()) == 3 and calls.ensembles == [True, False]
