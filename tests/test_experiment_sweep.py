"""Sweeps (dwatt.experiment.sweep): skipping finished runs, resuming an interrupted sweep, run-to-run determinism,
shards reported as one store, a backbone known by its weights. The command and its refusals: test_cli_sweep."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dwatt.experiment.grid import grid
from dwatt.experiment.store import ResultsStore
from dwatt.experiment.summaries import comparable
from dwatt.experiment.sweep import run_sweep
from dwatt.training import EXECUTION, RunConfig, run_ner

from .helpers import executing, recording_runner


def test_sweep_skips_finished_runs(tmp_path):
    from dwatt.experiment.grid import widest_first

    calls = []

    def runner(config: RunConfig) -> dict:
        calls.append(config.output_dir)
        return {"best_dev_f1": config.seed / 10}

    specs = grid(fusions=("base", "dwatt"), n_shots=(1,), epochs=(1,), trials=2)
    run_sweep(specs[:2], tmp_path / "r.jsonl", execution=executing(runner), progress=False)
    rows = run_sweep(specs, tmp_path / "r.jsonl", execution=executing(runner), progress=False)
    assert len(calls) == 4 and len(rows) == 4
    assert [r["run_id"] for r in rows] == [s.run_id for s in widest_first(specs)]  # each trial: DWAtt, then Base


def test_runs_another_store_holds_are_not_trained_again_nor_copied(tmp_path):
    from dataclasses import asdict

    calls = []

    def runner(config: RunConfig) -> dict:
        calls.append(config.output_dir)
        return {"best_dev_f1": config.seed / 10, "config": asdict(config)}

    specs = grid(fusions=("base", "dwatt"), n_shots=(1,), epochs=(1,), trials=2)
    probe = [s for s in specs if s.fusion == "base"]
    run_sweep(probe, tmp_path / "probe.jsonl", execution=executing(runner), progress=False)
    run_sweep(
        probe, tmp_path / "other-settings.jsonl", execution=executing(runner), progress=False, evaluate_test=True
    )
    calls.clear()
    rows = run_sweep(
        specs,
        tmp_path / "grid.jsonl",
        execution=executing(runner),
        progress=False,
        done_in=(tmp_path / "probe.jsonl",),
    )
    assert len(calls) == 2 and {r["spec"]["fusion"] for r in rows} == {"dwatt"}  # the probe's runs stay where they are
    calls.clear()
    run_sweep(
        specs,
        tmp_path / "grid-2.jsonl",
        execution=executing(runner),
        progress=False,
        done_in=(tmp_path / "other-settings.jsonl",),
    )
    assert len(calls) == 4  # the same ids with other settings are other runs
    with pytest.raises(FileNotFoundError, match="--done-in .*missing.jsonl"):
        run_sweep(
            specs,
            tmp_path / "grid-3.jsonl",
            execution=executing(runner),
            progress=False,
            done_in=(tmp_path / "missing.jsonl",),
        )
    assert not (tmp_path / "grid-3.jsonl").exists() or not ResultsStore(tmp_path / "grid-3.jsonl").rows()


def test_a_group_another_sweep_holds_is_left_to_it_and_trained_once_released(tmp_path):
    """Sweeps that share a store train the groups no other holds: a group one of whose runs another sweep claims is
    skipped whole (the budgets of one run train together), then trained by the next sweep once released."""
    from dwatt.experiment.store import ResultsStore
    from dwatt.experiment.sweep import claimed

    calls = []

    def budgets(configs):
        calls.append(sorted(c.epochs for c in configs))
        return [{"best_dev_f1": c.epochs / 100, "engine": "stacked"} for c in configs]

    specs = grid(fusions=("dwatt",), n_shots=(1,), epochs=(1, 2), trials=2)
    store = tmp_path / "r.jsonl"
    held = [spec for spec in specs if spec.trial == 1][:1]  # one budget of trial 1's run
    with claimed(ResultsStore(store), held) as mine:
        assert mine
        rows = run_sweep(specs, store, execution=executing(together=budgets), progress=False, engine="stacked")
    assert calls == [[1, 2]] and {row["spec"]["trial"] for row in rows} == {0}
    rows = run_sweep(specs, store, execution=executing(together=budgets), progress=False, engine="stacked")
    assert calls == [[1, 2], [1, 2]] and sorted(row["run_id"] for row in rows) == sorted(spec.run_id for spec in specs)


def sweep_beside_another(specs, store, trained, start):
    """One of two sweeps on one store (a forked process): the runs it trained, one per line of `trained`. Every read of
    the store waits after reading (a slow file system), so an append, which reads the store and then writes it, leaves
    room for the other sweep's: two sweeps appending at once would lose a row."""
    read = ResultsStore.rows

    def runner(config):
        with open(trained, "a") as out:
            out.write(config.output_dir + "\n")
        time.sleep(0.02)
        return {"best_dev_f1": config.seed / 10}

    def slow_rows(self):
        rows = read(self)
        time.sleep(0.03)
        return rows

    ResultsStore.rows = slow_rows  # in this forked process only
    start.wait()
    run_sweep(specs, store, execution=executing(runner), progress=False)


def test_two_sweeps_on_one_store_train_each_run_once_and_lose_no_row(tmp_path):
    import multiprocessing

    specs = grid(fusions=("base", "dwatt", "concat"), n_shots=(1, 2), epochs=(1,), trials=4)
    store = tmp_path / "r.jsonl"
    fork = multiprocessing.get_context("fork")
    start = fork.Barrier(2)
    workers = [
        fork.Process(target=sweep_beside_another, args=(specs, store, tmp_path / f"trained-{k}.txt", start))
        for k in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    trained = [
        line
        for k in range(2)
        if (tmp_path / f"trained-{k}.txt").exists()
        for line in (tmp_path / f"trained-{k}.txt").read_text().splitlines()
    ]
    assert len(trained) == len(set(trained)) == len(specs)  # no run trained twice, none left out
    rows = ResultsStore(store).rows()
    assert sorted(row["run_id"] for row in rows) == sorted(spec.run_id for spec in specs)  # one row each: none lost


def without_paths(row: dict) -> dict:
    row = comparable(row)
    row["config"] = {k: v for k, v in row["config"].items() if k != "output_dir"}
    return row


def sweep_command(tiny_backbone, tiny_conll, results):
    return [
        sys.executable,
        "-m",
        "dwatt.cli",
        "sweep",
        "--fusions",
        "base,dwatt",
        "--n-shots",
        "1",
        "--epochs",
        "2",
        "--trials",
        "2",
        "--backbone",
        str(tiny_backbone),
        "--data-dir",
        str(tiny_conll),
        "--results",
        str(results),
        "--cache-dtype",
        "float32",
        "--quiet",
    ]


def test_a_killed_sweep_resumes_to_the_same_results_as_an_uninterrupted_one(tiny_backbone, tiny_conll, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    interrupted = tmp_path / "interrupted" / "results.jsonl"
    process = subprocess.Popen(
        sweep_command(tiny_backbone, tiny_conll, interrupted),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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
        config = RunConfig(
            backbone=str(tiny_backbone),
            data_dir=str(tiny_conll),
            n_shot=2,
            epochs=2,
            batch_size=4,
            learning_rate=5e-3,
            seed=seed,
            output_dir=str(tmp_path / name),
            progress=False,
            save_model=False,
        )
        return run_ner(config)

    first, again, other = run(0, "a"), run(0, "b"), run(1, "c")
    assert without_paths(first) == without_paths(again)
    assert json.dumps(first["best_dev_scores"], sort_keys=True) == json.dumps(again["best_dev_scores"], sort_keys=True)
    assert first["sampled_sentence_ids"] != other["sampled_sentence_ids"]


def test_a_sweep_under_a_data_parallel_launcher_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    specs = grid(fusions=("base",), n_shots=(1,), epochs=(1,), trials=1)
    with pytest.raises(ValueError, match="--shard i/n"):
        run_sweep(specs, tmp_path / "r.jsonl", execution=executing(lambda config: {}), progress=False)


def test_sharded_stores_report_like_one_store_and_a_run_held_twice_differently_is_refused(
    tiny_backbone, tiny_conll, tmp_path, capsys
):
    from pathlib import Path

    from dwatt.cli import main
    from dwatt.experiment.report import write_report

    command = [
        "sweep",
        "--fusions",
        "base,dwatt",
        "--n-shots",
        "1",
        "--epochs",
        "2,3",
        "--trials",
        "2",
        "--backbone",
        str(tiny_backbone),
        "--data-dir",
        str(tiny_conll),
        "--cache-dtype",
        "float32",
        "--results",
        str(tmp_path / "results.jsonl"),
        "--quiet",
    ]
    for index in range(2):
        assert main(command + ["--shard", f"{index}/2"]) == 0
    shards = [tmp_path / f"results.shard-{index}-of-2.jsonl" for index in range(2)]
    assert "shard 1/2: 4 of the grid's 8 runs" in capsys.readouterr().out
    rows = [ResultsStore(path).rows() for path in shards]
    assert [len(r) for r in rows] == [4, 4] and {r["spec"]["trial"] for r in rows[0]} == {0}
    whole = tmp_path / "whole.jsonl"
    whole.write_text("".join(path.read_text() for path in reversed(shards)))
    # A smaller grid on a store that holds more: its own count, then the store's (nothing reruns)
    smaller = [
        ("base" if arg == "base,dwatt" else str(whole) if arg.endswith("results.jsonl") else arg) for arg in command
    ]
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
    with pytest.raises(
        ValueError,
        match=rf"run {changed['run_id']} appears twice with different results \(best_dev_f1.*{Path(shards[1]).name}.*conflict\.jsonl",
    ):
        write_report(shards + [conflicting], tmp_path / "conflict")


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
        run_sweep(specs, store, execution=executing(recording_runner(calls)), progress=False, engine="trainer")
    assert len(calls) == 2 and [row["run_id"].split("/")[1] for row in ResultsStore(store).rows()] == ["a", "b"]
    first = copy_backbone(tiny_backbone, tmp_path / "x" / "same")
    second = copy_backbone(tiny_backbone, tmp_path / "y" / "same")
    weights = load_file(str(second / "model.safetensors"))
    save_file(
        {k: torch.zeros_like(v) for k, v in weights.items()},
        str(second / "model.safetensors"),
        metadata={"format": "pt"},
    )
    for backbone in (first, second):
        specs = grid(fusions=("base",), n_shots=(1,), epochs=(1,), trials=1, backbones=(str(backbone),))
        if backbone == second:
            with pytest.raises(
                ValueError,
                match=r"r\.jsonl:3: run conll2003/same/.* other settings \(backbone_sha256: '\w+' there, '\w+' here\)",
            ):
                run_sweep(specs, store, execution=executing(recording_runner(calls)), progress=False, engine="trainer")
        else:
            run_sweep(specs, store, execution=executing(recording_runner(calls)), progress=False, engine="trainer")
    assert len(calls) == 3 and len(ResultsStore(store).rows()) == 3


def test_a_backbone_written_again_elsewhere_is_the_same_backbone(tiny_backbone, tmp_path):
    """A folder converted again (another `_name_or_path` in its config.json, another transformers_version) resumes its
    runs, and so do rows fingerprinted the earlier way (config.json's bytes); a key that computes (the layer norm's
    epsilon) makes it another backbone."""
    import json

    from dwatt.experiment.store import backbone_fingerprint

    calls, store = [], tmp_path / "r.jsonl"
    backbone = copy_backbone(tiny_backbone, tmp_path / "bb")
    config_path = backbone / "config.json"
    specs = grid(fusions=("base",), n_shots=(1,), epochs=(1,), trials=1, backbones=(str(backbone),))

    def rewrite_config(**changes):
        config_path.write_text(json.dumps(json.loads(config_path.read_text()) | changes))

    rewrite_config(_name_or_path="/tmp/tmp.first/x")
    run_sweep(specs, store, execution=executing(recording_runner(calls)), progress=False, engine="trainer")
    rewrite_config(_name_or_path="/tmp/tmp.second/x", transformers_version="9.9.9")
    run_sweep(specs, store, execution=executing(recording_runner(calls)), progress=False, engine="trainer")
    assert len(calls) == 1
    row = ResultsStore(store).rows()[0]
    earlier = row | {"backbone_sha256": backbone_fingerprint(str(backbone), verbatim=True)}
    assert earlier["backbone_sha256"] != row["backbone_sha256"]
    store.write_text(json.dumps(earlier) + "\n")
    run_sweep(specs, store, execution=executing(recording_runner(calls)), progress=False, engine="trainer")
    assert len(calls) == 1
    rewrite_config(layer_norm_eps=1e-3)
    with pytest.raises(ValueError, match=r"other settings \(backbone_sha256: '\w+' there, '\w+' here\)"):
        run_sweep(specs, store, execution=executing(recording_runner(calls)), progress=False, engine="trainer")
    assert len(calls) == 1 and len(ResultsStore(store).rows()) == 1


@pytest.mark.parametrize(
    "first, second, named",
    [
        ({"dev_sentences": 20}, {"dev_sentences": 30}, "dev_sentences: 20 there, 30 here"),
        ({}, {"evaluate_test": True}, "evaluate_test: False there, True here"),
        ({}, {"cache_dtype": "float32"}, "cache_dtype: 'float16' there, 'float32' here"),
        ({}, {"data_dir": "other"}, "data_dir: None there, 'other' here"),
        ({}, {"engine": "stacked"}, "engine: 'trainer' there, 'stacked' here"),
    ],
)
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
        return run_sweep(
            specs,
            store,
            execution=executing(runner, lambda configs: [runner(c) for c in configs]),
            progress=False,
            engine=options.get("engine", "trainer"),
            **overrides,
        )

    calls = []
    sweep(first, recording_runner(calls))
    before = store.read_bytes()
    with pytest.raises(ValueError, match=rf"r\.jsonl:1: run conll2003/default/fe/dwatt/.* other settings \(.*{named}"):
        sweep(second, recording_runner(calls))
    assert len(calls) == 1 and store.read_bytes() == before
    if second == {"evaluate_test": True}:  # the same through the command line: one line, exit 2
        assert (
            main(
                [
                    "sweep",
                    "--fusions",
                    "dwatt",
                    "--n-shots",
                    "1",
                    "--epochs",
                    "1",
                    "--trials",
                    "1",
                    "--test",
                    "--engine",
                    "trainer",
                    "--results",
                    str(store),
                    "--quiet",
                ]
            )
            == 2
        )
        assert "evaluate_test: False there, True here" in capsys.readouterr().err


def test_a_group_a_stopped_sweep_held_is_trained_and_no_claim_file_stays(tmp_path):
    """A worker killed while it held a group leaves its claim's file but no lock: a sweep beside it trains that group
    once the lock is gone (it tries the groups it left once more at its end), removes every claim file of the runs it
    stored, and does not count a file without a lock as a run still training."""
    from filelock import FileLock

    from dwatt.experiment.sweep import claim_path

    calls = []
    specs = grid(fusions=("dwatt",), n_shots=(1,), epochs=(1,), trials=2)
    store = tmp_path / "r.jsonl"
    dead = FileLock(claim_path(ResultsStore(store), specs[1]))
    dead.acquire()

    def runner(config):
        calls.append(config.seed)
        if dead.is_locked:  # the other worker is killed while this one trains
            dead.release()
        return {"best_dev_f1": 0.5}

    rows = run_sweep(specs, store, execution=executing(runner), progress=False, engine="trainer")
    assert sorted(calls) == [0, 1] and len(rows) == 2
    assert not list(tmp_path.glob(".r.jsonl.claims/*"))  # the empty folder stays: another sweep may claim in it
    # a claim file a killed worker left behind, no lock on it: not "still training"; a live claim is
    from dwatt.experiment.sweep import held_elsewhere

    other = ResultsStore(tmp_path / "s.jsonl")
    for spec in specs:
        claim_path(other, spec).parent.mkdir(parents=True, exist_ok=True)
        claim_path(other, spec).touch()
    assert held_elsewhere(other, specs) == 0
    live = FileLock(claim_path(other, specs[0]))
    live.acquire()
    assert held_elsewhere(other, specs) == 1
    live.release()


def test_every_fusion_and_trial_of_a_sweep_reads_one_disk_cache_of_the_dev_set(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    """The caches a sweep sends to disk live in one folder under its output root, named by what they hold: a later
    sweep's fusion on the same layers (another process: nothing remembered in memory) reads the dev set's features
    from the file the first one wrote instead of running the backbone again; each trial's training sample has its
    own file. The rows record the folder relative to the output root."""
    from dwatt.training import FEATURE_MEMO

    monkeypatch.setattr("dwatt.features.memory.MEMORY_SHARE", 0.0)  # every cache to disk
    store, root = tmp_path / "results.jsonl", tmp_path / "runs"
    options = dict(
        n_shots=(1,),
        epochs=(2,),
        trials=2,
        backbones=(str(tiny_backbone),),
        data_dir=str(tiny_conll),
        learning_rate=1e-3,
    )

    def sweep(fusion):
        FEATURE_MEMO.clear()
        rows = run_sweep(
            grid((fusion,), **options),
            store,
            root,
            execution=EXECUTION,
            progress=False,
            engine="stacked",
            cache_dtype="float32",
        )
        return rows, sorted(path.name for path in (root / ".feature-cache").glob("*.bin"))

    rows, files = sweep("scalar_mix")
    assert len(files) == 3  # the dev set's, and each trial's training sample's
    assert {row["config"]["feature_cache_dir"] for row in rows} == {".feature-cache"}
    assert all(row["cache_storage"] == "disk" for row in rows)
    rows, again = sweep("concat")
    assert again == files and len(rows) == 4
    FEATURE_MEMO.clear()
    assert not list(root.rglob("*/.feature-cache"))  # none beside a run's folder


def test_an_error_while_the_runs_bar_shows_is_printed_on_a_line_of_its_own(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch, capsys
):
    """Not `...(+5 trained together)]dwatt probe: error: ...`: the bars close however the runs end."""
    from dwatt.cli import main

    def failing(*args, **kwargs):
        raise ValueError("the heads could not train")

    monkeypatch.setattr("dwatt.training.together.train_heads", failing)
    options = ["--backbone", str(tiny_backbone), "--data-dir", str(tiny_conll), "--n-shot", "1", "--epochs", "1"]
    assert main(["probe", *options, "--widen", "0", "--no-baselines", "--output", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "runs:" in error  # the bar was shown
    assert "\ndwatt probe: error: the heads could not train" in error, error[-300:]
