"""dwatt sweep (dwatt.cli.sweep): a sweep on a results file whose lock another process holds past an append is
refused in one line, a sweep beside another on one store says what it left to it, and a window sweep names a trial
its probe stores lack before anything trains. The sweep itself: test_experiment_sweep."""

import pytest

from dwatt.experiment.grid import grid
from dwatt.experiment.sweep import run_sweep

from .helpers import executing


def test_a_sweep_whose_store_lock_is_held_past_an_append_is_refused(tmp_path, capsys, monkeypatch):
    from filelock import FileLock

    from dwatt.cli import main
    from dwatt.errors import SweepBusyError
    from dwatt.experiment import sweep

    monkeypatch.setattr(sweep, "APPEND_WAIT_SECONDS", 0.2)
    specs = grid(fusions=("base",), n_shots=(1,), epochs=(1,), trials=1)
    with FileLock(tmp_path / ".r.jsonl.lock"):  # held, not released as an append would
        with pytest.raises(SweepBusyError, match=r"r\.jsonl: another process has held this results file's lock"):
            run_sweep(specs, tmp_path / "r.jsonl", execution=executing(lambda config: {}), progress=False)
        assert main(["sweep", "--fusions", "base", "--results", str(tmp_path / "r.jsonl"), "--quiet"]) == 2
        assert "longer than an append takes" in capsys.readouterr().err
    assert not (tmp_path / "r.jsonl").exists()
    assert (
        len(run_sweep(specs, tmp_path / "r.jsonl", execution=executing(lambda config: {}), progress=False)) == 1
    )  # released


def test_a_window_sweep_names_a_trial_its_probe_stores_lack_before_anything_trains(tmp_path, capsys):
    """`--window-around-probe`: the windows follow the probe's rows; a trial without them is named, nothing runs."""
    import json

    from dwatt.cli import main

    from .helpers import window_grid_rows

    probe = tmp_path / "probe.jsonl"
    probe.write_text("".join(json.dumps(row) + "\n" for row in window_grid_rows()))
    assert (
        main(
            [
                "sweep",
                "--fusions",
                "scalar_mix",
                "--n-shots",
                "32",
                "--epochs",
                "25",
                "--trials",
                "3",
                "--backbones",
                "/m/deep",
                "--window-around-probe",
                str(probe),
                "--results",
                str(tmp_path / "r.jsonl"),
                "--quiet",
            ]
        )
        == 2
    )
    assert (
        "no probe of every layer, scored on test, for conll2003/deep/fe/scalar_mix/n32/e25/t2"
        in capsys.readouterr().err
    )
    assert main(["sweep", "--fusions", "scalar_mix", "--window-alone", "--results", str(tmp_path / "r.jsonl")]) == 2
    assert "--window-alone shapes the windows of --window-around-probe" in capsys.readouterr().err
    assert not (tmp_path / "r.jsonl").exists()


def test_a_window_sweep_takes_the_preferred_probe_row_of_a_run_held_twice(tmp_path, capsys):
    """Two probe stores that hold one run with different results (a probe trained again) are refused, naming the
    run, unless `--prefer` names the one to believe; `--prefer` without windows to shape is refused."""
    import json

    from dwatt.cli import main

    from .helpers import window_grid_rows

    rows = window_grid_rows()
    first, again = tmp_path / "probe.jsonl", tmp_path / "probe-again.jsonl"
    first.write_text("".join(json.dumps(row) + "\n" for row in rows))
    retrained = rows[0] | {"best_dev_f1": rows[0]["best_dev_f1"] + 1e-6}
    again.write_text(json.dumps(retrained) + "\n")
    sweep = [
        "sweep",
        "--fusions",
        "scalar_mix",
        "--n-shots",
        "32",
        "--epochs",
        "25",
        "--trials",
        "3",
        "--backbones",
        "/m/deep",
        "--window-around-probe",
        str(first),
        str(again),
        "--results",
        str(tmp_path / "r.jsonl"),
        "--quiet",
    ]
    assert main(sweep) == 2
    assert "appears twice with different results (best_dev_f1)" in capsys.readouterr().err
    assert main([*sweep, "--prefer", str(again)]) == 2  # read past the twice-held run, to the trial no probe holds
    assert (
        "no probe of every layer, scored on test, for conll2003/deep/fe/scalar_mix/n32/e25/t2"
        in capsys.readouterr().err
    )
    assert (
        main(["sweep", "--fusions", "scalar_mix", "--prefer", str(again), "--results", str(tmp_path / "r.jsonl")]) == 2
    )
    assert "--prefer shapes the windows of --window-around-probe" in capsys.readouterr().err
    assert not (tmp_path / "r.jsonl").exists()


def tiny_sweep(backbone, data, store, *options: str) -> list[str]:
    """`dwatt sweep` of one trial, N = 1 and one epoch on a tiny backbone and data folder, into `store`."""
    return [
        "sweep",
        *("--n-shots", "1", "--epochs", "1", "--trials", "1"),
        *("--backbone", str(backbone), "--data-dir", str(data), "--results", str(store)),
        *options,
    ]


def test_a_sweep_beside_another_on_one_store_says_what_it_left_to_it(tiny_backbone, tiny_conll, tmp_path, capsys):
    """A run another sweep on the store holds is left to it, and the summary line says so."""
    from dwatt.cli import main
    from dwatt.experiment.store import ResultsStore
    from dwatt.experiment.sweep import claimed

    store = tmp_path / "r.jsonl"
    specs = grid(
        fusions=("base", "dwatt"),
        n_shots=(1,),
        epochs=(1,),
        trials=1,
        backbones=(str(tiny_backbone),),
        data_dir=str(tiny_conll),
        datasets=(tiny_conll.name,),  # as the command names a folder of one's own
    )
    with claimed(ResultsStore(store), [spec for spec in specs if spec.fusion == "dwatt"]) as mine:
        assert mine
        assert main(tiny_sweep(tiny_backbone, tiny_conll, store, "--fusions", "base,dwatt", "--quiet")) == 0
    assert (
        "1 of the grid's 2 runs done, 1 still training in other sweeps on this store; 1 rows"
        in capsys.readouterr().out
    )
    assert [row["spec"]["fusion"] for row in ResultsStore(store).rows()] == ["base"]


def test_a_widened_sweep_trains_the_next_rate_past_the_edge_dev_chose(tiny_backbone, tiny_conll, tmp_path, capsys):
    """Two rates: dev's choice is one of the edges, so the sweep trains the rate one step past it (1e-2 above, 1e-5
    below), chooses again, and with --widen 1 goes no further, saying so where the choice is still at an edge; run
    again, it trains nothing."""
    from dwatt.cli import main
    from dwatt.experiment.store import ResultsStore

    store = tmp_path / "r.jsonl"
    command = tiny_sweep(
        tiny_backbone,
        tiny_conll,
        store,
        "--fusions",
        "base",
        "--learning-rates",
        "1e-4,1e-3",
        "--widen",
        "1",
        "--quiet",
    )
    assert main(command) == 0
    out = capsys.readouterr().out
    rates = sorted(row["spec"]["learning_rate"] for row in ResultsStore(store).rows())
    assert len(rates) == 3 and rates[1:] == [1e-3, 1e-2] or rates[:2] == [1e-5, 1e-4]
    assert "widening: 1 runs at " in out and "3 of the grid's 3 runs done" in out
    assert main(command) == 0
    assert len(ResultsStore(store).rows()) == 3 and "widening:" not in capsys.readouterr().out
    assert main([*command[:-3], "--widen", "1", "--shard", "0/2"]) == 2
    assert "--widen with --shard" in capsys.readouterr().err
