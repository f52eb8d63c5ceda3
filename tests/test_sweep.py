"""Grids, the results store, resuming an interrupted sweep, and run-to-run determinism."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dwatt.summaries import comparable
from dwatt.sweep import PAPER_FUSIONS, PRESETS, ResultsStore, grid, run_sweep
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
    from dwatt.sweep import widest_first

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
    from dwatt.sweep import SweepBusyError

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
    from dwatt.sweep import shard, work_unit

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
    from dwatt.sweep import parse_shard, shard, shard_results_path

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
    from dwatt.report import write_report

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
