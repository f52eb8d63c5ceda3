"""Grids, the results store, resuming an interrupted sweep, and run-to-run determinism."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dwatt.experiment.summaries import comparable
from dwatt.experiment.grid import PAPER_FUSIONS, PRESETS, grid
from dwatt.experiment.store import ResultsStore
from dwatt.experiment.sweep import run_sweep
from dwatt.training import RunConfig, run_ner


def test_paper_grid_has_every_combination_once_and_trials_together():
    specs = grid(**PRESETS["conll-fe"])
    assert len(specs) == 5 * 5 * 4 * 5 == len({s.run_id for s in specs})
    trials = [s.trial for s in specs]
    assert trials == sorted(trials)  # all runs of a trial (one sample) come together
    assert specs[0].run_id == "conll2003/roberta-large/fe/base/n8/e25/t0"
    assert len(grid(**PRESETS["conll-fe-vs-ft"])) == 4 * 2 * 2 * 5


def test_presets_cover_every_paper_experiment():
    tiers = grid(**PRESETS["wikiann-tiers"])
    assert len(tiers) == 4 * 27 * 5 and tiers[0].run_id == "wikiann:af/xlm-roberta-large/fe/base/s100/e25/t0"
    assert {s.run_config("r").sampling for s in tiers} == {"sentences"}
    mlm = grid(**PRESETS["wikitext-mlm"])
    assert [s.run_id for s in mlm] == [f"wikitext2/roberta-large/ft/{f}/e3/t0" for f in PAPER_FUSIONS]
    assert {(c.task, c.n_shot, c.mode) for c in (s.run_config("r") for s in mlm)} == {("mlm", None, "ft")}
    large = grid(**PRESETS["base-vs-large"])
    assert {s.backbone for s in large} == {"roberta-base", "roberta-large"} and len(large) == 2 * 4 * 5 * 5
    assert len(grid(**PRESETS["wikiann-en"])) == 4 * 5


def test_store_rewrites_atomically_and_names_a_bad_line(tmp_path):
    store = ResultsStore(tmp_path / "results.jsonl")
    store.append({"run_id": "a", "f1": 0.5})
    store.append({"run_id": "b", "f1": 0.6})
    assert [r["run_id"] for r in store.rows()] == ["a", "b"] and store.done() == {"a", "b"}
    assert [p.name for p in tmp_path.iterdir()] == ["results.jsonl"]  # no temporary file left behind
    store.path.write_text(store.path.read_text() + '{"run_id": "c", "f1"\n')
    with pytest.raises(ValueError, match=r"results\.jsonl:3: not a JSON row"):
        store.rows()


def test_sweep_skips_finished_runs(tmp_path):
    from dwatt.experiment.grid import widest_first

    calls = []

    def runner(config: RunConfig) -> dict:
        calls.append(config.output_dir)
        return {"best_dev_f1": config.seed / 10}

    specs = grid(fusions=("base", "dwatt"), n_shots=(1,), epochs=(1,), trials=2)
    run_sweep(specs[:2], tmp_path / "r.jsonl", runner=runner, progress=False)
    rows = run_sweep(specs, tmp_path / "r.jsonl", runner=runner, progress=False)
    assert len(calls) == 4 and len(rows) == 4
    assert [r["run_id"] for r in rows] == [s.run_id for s in widest_first(specs)]  # each trial: DWAtt, then Base


def test_a_second_sweep_on_the_same_results_file_is_refused(tmp_path, capsys):
    from filelock import FileLock

    from dwatt.cli import main
    from dwatt.errors import SweepBusyError

    specs = grid(fusions=("base",), n_shots=(1,), epochs=(1,), trials=1)
    with FileLock(tmp_path / ".r.jsonl.lock"):  # what a running sweep holds
        with pytest.raises(SweepBusyError, match=r"r\.jsonl: another sweep is writing this results file"):
            run_sweep(specs, tmp_path / "r.jsonl", runner=lambda config: {}, progress=False)
        assert main(["sweep", "--fusions", "base", "--results", str(tmp_path / "r.jsonl"), "--quiet"]) == 2
        assert "another sweep is writing" in capsys.readouterr().err
    assert not (tmp_path / "r.jsonl").exists()
    assert len(run_sweep(specs, tmp_path / "r.jsonl", runner=lambda config: {}, progress=False)) == 1  # released


def without_paths(row: dict) -> dict:
    row = comparable(row)
    row["config"] = {k: v for k, v in row["config"].items() if k != "output_dir"}
    return row


def sweep_command(tiny_backbone, tiny_conll, results):
    return [sys.executable, "-m", "dwatt.cli", "sweep", "--fusions", "base,dwatt", "--n-shots", "1", "--epochs", "2",
            "--trials", "2", "--backbone", str(tiny_backbone), "--data-dir", str(tiny_conll), "--results", str(results),
            "--cache-dtype", "float32", "--quiet"]


def test_a_killed_sweep_resumes_to_the_same_results_as_an_uninterrupted_one(tiny_backbone, tiny_conll, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    interrupted = tmp_path / "interrupted" / "results.jsonl"
    process = subprocess.Popen(sweep_command(tiny_backbone, tiny_conll, interrupted), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        if interrupted.exists() and len(interrupted.read_text().splitlines()) >= 1:
            break
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    finished_before = len(ResultsStore(interrupted).rows())
    assert 1 <= finished_before < 4, "the sweep should be killed part-way"
    subprocess.run(sweep_command(tiny_backbone, tiny_conll, interrupted), env=env, check=True, capture_output=True)
    straight = tmp_path / "straight" / "results.jsonl"
    subprocess.run(sweep_command(tiny_backbone, tiny_conll, straight), env=env, check=True, capture_output=True)
    resumed_rows, straight_rows = ResultsStore(interrupted).rows(), ResultsStore(straight).rows()
    assert [r["run_id"] for r in resumed_rows] == [r["run_id"] for r in straight_rows] and len(straight_rows) == 4
    assert [without_paths(r) for r in resumed_rows] == [without_paths(r) for r in straight_rows]


def test_same_seed_gives_identical_results_and_other_seeds_other_samples(tiny_backbone, tiny_conll, tmp_path):
    def run(seed, name):
        config = RunConfig(backbone=str(tiny_backbone), data_dir=str(tiny_conll), n_shot=2, epochs=2, batch_size=4,
                           learning_rate=5e-3, seed=seed, output_dir=str(tmp_path / name), progress=False, save_model=False)
        return run_ner(config)

    first, again, other = run(0, "a"), run(0, "b"), run(1, "c")
    assert without_paths(first) == without_paths(again)
    assert json.dumps(first["best_dev_scores"], sort_keys=True) == json.dumps(again["best_dev_scores"], sort_keys=True)
    assert first["sampled_sentence_ids"] != other["sampled_sentence_ids"]


@pytest.mark.parametrize("preset, count", [("conll-fe", 4), ("conll-fe", 25), ("conll-fe-vs-ft", 3), ("wikiann-tiers", 7), ("smoke", 1)])
def test_shards_cover_the_grid_exactly_once_and_keep_each_sample_whole(preset, count):
    from dwatt.experiment.grid import shard, work_unit

    specs = grid(**PRESETS[preset])
    shards = [shard(specs, index, count) for index in range(count)]
    ids = [spec.run_id for part in shards for spec in part]
    assert sorted(ids) == sorted(s.run_id for s in specs) and len(ids) == len(set(ids))  # union = grid, no overlap
    assert all(shards) and max(map(len, shards)) - min(map(len, shards)) <= max(len(p) for p in shards) // 2 + 1
    owner = {work_unit(spec): index for index, part in enumerate(shards) for spec in part}
    for index, part in enumerate(shards):  # every fusion and budget of a sample (which share features) in one shard
        assert {owner[work_unit(spec)] for spec in part} == {index}
        assert [s.run_id for s in part] == [s.run_id for s in specs if s in set(part)]  # grid order kept
    assert shard(specs, 0, count) == shards[0]  # deterministic


def test_shard_arguments_are_checked():
    from dwatt.experiment.grid import parse_shard, shard
    from dwatt.experiment.store import shard_results_path

    assert parse_shard("0/4") == (0, 4) and parse_shard("3/4") == (3, 4)
    for bad in ("4/4", "-1/4", "1/0", "1", "a/b", "1/2/3"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)
    specs = grid(fusions=("base", "dwatt"), n_shots=(8,), epochs=(25, 50), trials=2)
    with pytest.raises(ValueError, match="this grid has 2 units of work.*at most 2 shards"):
        shard(specs, 0, 3)
    assert shard_results_path("runs/sweep/results.jsonl", 1, 4).as_posix() == "runs/sweep/results.shard-1-of-4.jsonl"


def test_a_sweep_under_a_data_parallel_launcher_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    specs = grid(fusions=("base",), n_shots=(1,), epochs=(1,), trials=1)
    with pytest.raises(ValueError, match="--shard i/n"):
        run_sweep(specs, tmp_path / "r.jsonl", runner=lambda config: {}, progress=False)


def test_sharded_stores_report_like_one_store_and_a_run_held_twice_differently_is_refused(tiny_backbone, tiny_conll, tmp_path, capsys):
    from pathlib import Path

    from dwatt.cli import main
    from dwatt.experiment.report import write_report

    command = ["sweep", "--fusions", "base,dwatt", "--n-shots", "1", "--epochs", "2,3", "--trials", "2",
               "--backbone", str(tiny_backbone), "--data-dir", str(tiny_conll), "--cache-dtype", "float32",
               "--results", str(tmp_path / "results.jsonl"), "--quiet"]
    for index in range(2):
        assert main(command + ["--shard", f"{index}/2"]) == 0
    shards = [tmp_path / f"results.shard-{index}-of-2.jsonl" for index in range(2)]
    assert "shard 1/2: 4 of the grid's 8 runs" in capsys.readouterr().out
    rows = [ResultsStore(path).rows() for path in shards]
    assert [len(r) for r in rows] == [4, 4] and {r["spec"]["trial"] for r in rows[0]} == {0}
    whole = tmp_path / "whole.jsonl"
    whole.write_text("".join(path.read_text() for path in reversed(shards)))
    # A smaller grid on a store that holds more: its own count, then the store's (nothing reruns)
    smaller = [("base" if arg == "base,dwatt" else str(whole) if arg.endswith("results.jsonl") else arg) for arg in command]
    assert main(smaller) == 0
    assert f"4 of the grid's 4 runs done; 8 rows in {whole}" in capsys.readouterr().out

    def report_of(paths, folder):
        report = write_report(paths, tmp_path / folder)
        text = report.read_text().splitlines()
        tables = {p.name: p.read_text() for p in sorted((tmp_path / folder / "tables").iterdir())}
        return [line for line in text if not line.startswith("Generated by")], tables, text

    sharded, one = report_of(shards, "sharded"), report_of([whole], "one")
    assert sharded[:2] == one[:2] and "(8 runs)" in "\n".join(sharded[2])
    # The same run in two stores: counted once when its results agree, refused when they do not.
    assert report_of(shards + [whole], "twice")[:2] == one[:2]
    changed = json.loads(shards[1].read_text().splitlines()[0])
    changed["best_dev_f1"] += 0.01
    conflicting = tmp_path / "conflict.jsonl"
    conflicting.write_text(json.dumps(changed) + "\n")
    with pytest.raises(ValueError, match=rf"run {changed['run_id']} appears twice with different results \(best_dev_f1.*{Path(shards[1]).name}.*conflict\.jsonl"):
        write_report(shards + [conflicting], tmp_path / "conflict")


def recording_runner(calls: list):
    """A stand-in for a run: records the config and returns it the way a run's results do."""
    from dataclasses import asdict

    def runner(config: RunConfig) -> dict:
        calls.append(config)
        return {"config": asdict(config), "best_dev_f1": 0.5, "engine": "trainer"}

    return runner


def copy_backbone(source, target):
    import shutil

    shutil.copytree(source, target)
    return target


def test_two_backbones_in_folders_of_one_name_train_their_own_runs(tiny_backbone, tmp_path):
    """`bb/a/model` and `bb/b/model`: ids by the parent's name; `x/same` and `y/same` (other weights): refused,
    the fingerprints named, never reported done."""
    import torch
    from safetensors.torch import load_file, save_file

    calls = []
    store = tmp_path / "r.jsonl"
    for parent in ("a", "b"):
        backbone = copy_backbone(tiny_backbone, tmp_path / "bb" / parent / "model")
        specs = grid(fusions=("base",), n_shots=(1,), epochs=(1,), trials=1, backbones=(str(backbone),))
        run_sweep(specs, store, runner=recording_runner(calls), progress=False, engine="trainer")
    assert len(calls) == 2 and [row["run_id"].split("/")[1] for row in ResultsStore(store).rows()] == ["a", "b"]
    first = copy_backbone(tiny_backbone, tmp_path / "x" / "same")
    second = copy_backbone(tiny_backbone, tmp_path / "y" / "same")
    weights = load_file(str(second / "model.safetensors"))
    save_file({k: torch.zeros_like(v) for k, v in weights.items()}, str(second / "model.safetensors"), metadata={"format": "pt"})
    for backbone in (first, second):
        specs = grid(fusions=("base",), n_shots=(1,), epochs=(1,), trials=1, backbones=(str(backbone),))
        if backbone == second:
            with pytest.raises(ValueError, match=r"r\.jsonl:3: run conll2003/same/.* other settings \(backbone_sha256: '\w+' there, '\w+' here\)"):
                run_sweep(specs, store, runner=recording_runner(calls), progress=False, engine="trainer")
        else:
            run_sweep(specs, store, runner=recording_runner(calls), progress=False, engine="trainer")
    assert len(calls) == 3 and len(ResultsStore(store).rows()) == 3


@pytest.mark.parametrize("first, second, named", [
    ({"dev_sentences": 20}, {"dev_sentences": 30}, "dev_sentences: 20 there, 30 here"),
    ({}, {"evaluate_test": True}, "evaluate_test: False there, True here"),
    ({}, {"cache_dtype": "float32"}, "cache_dtype: 'float16' there, 'float32' here"),
    ({}, {"data_dir": "other"}, "data_dir: None there, 'other' here"),
    ({}, {"engine": "budgets"}, "engine: 'trainer' there, 'budgets' here"),
])
def test_a_store_never_reports_done_a_run_with_other_settings(tmp_path, first, second, named, capsys):
    """A re-run with other --dev-sentences/--test/--cache-dtype/--data-dir/--engine is refused with the difference
    named, before anything trains; the store keeps its rows."""
    from dwatt.cli import main

    (tmp_path / "other").mkdir()
    store = tmp_path / "r.jsonl"

    def sweep(options: dict, runner):
        spec_options = {k: v for k, v in options.items() if k in ("dev_sentences", "data_dir")}
        if "data_dir" in spec_options:
            spec_options["data_dir"] = str(tmp_path / spec_options["data_dir"])
        overrides = {k: v for k, v in options.items() if k in ("evaluate_test", "cache_dtype")}
        specs = grid(fusions=("dwatt",), n_shots=(1,), epochs=(1,), trials=1, **spec_options)
        return run_sweep(specs, store, runner=runner, budgets_runner=lambda configs: [runner(c) for c in configs],
                         progress=False, engine=options.get("engine", "trainer"), **overrides)

    calls = []
    sweep(first, recording_runner(calls))
    before = store.read_bytes()
    with pytest.raises(ValueError, match=rf"r\.jsonl:1: run conll2003/default/fe/dwatt/.* other settings \(.*{named}"):
        sweep(second, recording_runner(calls))
    assert len(calls) == 1 and store.read_bytes() == before
    if second == {"evaluate_test": True}:  # the same through the command line: one line, exit 2
        assert main(["sweep", "--fusions", "dwatt", "--n-shots", "1", "--epochs", "1", "--trials", "1", "--test",
                     "--engine", "trainer", "--results", str(store), "--quiet"]) == 2
        assert "evaluate_test: False there, True here" in capsys.readouterr().err


def test_committed_stores_read_as_todays_runs():
    """Every row of every committed store is the run its spec asks for today (the identity's fields its code did not
    know yet at their defaults): a resumed grid skips them all. A backbone's fingerprint is compared where its folder
    is on this machine; a clone without the weights (CI) checks the rest of the identity."""
    from pathlib import Path

    from dwatt.experiment.grid import RunSpec
    from dwatt.experiment.store import differences, requested_settings, row_settings, same_run

    stores = sorted(Path(__file__).parents[1].glob("docs/results/**/*.jsonl"))
    assert len(stores) >= 10
    for path in stores:
        for row in ResultsStore(path).rows():
            # what a sweep's own options set (--cache-dtype, --test, --few-shot-dev), as the row was run
            overrides = {key: row["config"][key] for key in ("cache_dtype", "evaluate_test")}
            overrides["few_shot_dev"] = row["config"].get("few_shot_dev", False)
            wanted, theirs = requested_settings(RunSpec(**row["spec"]), overrides), row_settings(row)
            if wanted["backbone_sha256"] is None:
                theirs = theirs | {"backbone_sha256": None}
            assert same_run(theirs, wanted), f"{path}: {row['run_id']}: {differences(theirs, wanted)}"


@pytest.mark.parametrize("options, named", [
    ({"fusions": ()}, "--fusions: no value given"),
    ({"learning_rates": ()}, "--learning-rates: no value given"),
    ({"trials": 0}, "--trials must be >= 1, got 0"),
    ({"n_shots": ()}, "--n-shots: no value given"),
])
def test_an_empty_grid_is_refused(options, named):
    with pytest.raises(ValueError, match=named):
        grid(**{"fusions": ("base",), "n_shots": (1,), "epochs": (1,), "trials": 1} | options)


@pytest.mark.parametrize("line, named", [
    ('[1, 2]', r"r\.jsonl:2: a store row is a JSON object with a 'run_id' \(got list\)"),
    ('{"f1": 0.5}', r"r\.jsonl:2: a store row is a JSON object with a 'run_id' \(got dict without run_id\)"),
])
def test_a_store_row_of_another_shape_is_named(tmp_path, line, named):
    store = tmp_path / "r.jsonl"
    store.write_text('{"run_id": "a"}\n' + line + "\n")
    with pytest.raises(ValueError, match=named):
        ResultsStore(store).rows()


def test_a_spec_names_its_run_with_the_config_s_own_fields_and_its_trial():
    """RunConfig owns what a run's settings mean and their defaults; a spec adds only the trial (its seed)."""
    from dataclasses import fields

    from dwatt.experiment.grid import SHARED_WITH_CONFIG, RunSpec

    assert {f.name for f in fields(RunSpec)} - set(SHARED_WITH_CONFIG) == {"trial"}
    config = RunSpec("dwatt", "fe", None, 3, 2, "wikitext2", task="mlm", learning_rate=None).run_config("runs")
    assert (config.n_shot, config.seed, config.learning_rate) == (None, 2, RunConfig().learning_rate)
