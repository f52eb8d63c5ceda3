"""What several commands share (dwatt.cli.options): comma-separated values, the batch size checked, and the model
`predict` and `evaluate` run, in the runtime its folder was written for (a `--runtime` naming the other is refused)."""

import argparse

import pytest
from torch.ao.nn.quantized import dynamic as dynamic_quantized

from dwatt.cli.options import csv_of, inference_model, parse_size, positive_batch_size, runtime


def test_comma_separated_values_skip_empty_items():
    assert csv_of(float)("3e-4,,1e-2,") == (3e-4, 1e-2) and csv_of(str)("") == ()


def test_memory_sizes_read_as_people_write_them_and_anything_else_is_refused_with_an_example(capsys):
    from dwatt.cli import main

    assert parse_size("8GiB") == 8 << 30 and parse_size("8G") == 8 * 10**9 and parse_size(" 1.5 gib") == 3 << 29
    assert parse_size("512MiB") == 512 << 20 and parse_size("4096") == 4096
    for bad in ("eight", "8 parsecs", "0GiB", "-1G"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a size such as 8GiB, 512MiB or 8G"):
            parse_size(bad)
    with pytest.raises(SystemExit):
        main(["probe", "--max-memory", "lots"])
    assert "argument --max-memory: expected a size such as 8GiB, 512MiB or 8G, got 'lots'" in capsys.readouterr().err


def test_a_batch_size_below_one_is_refused_with_the_option_named():
    positive_batch_size(argparse.Namespace(batch_size=1))
    with pytest.raises(ValueError, match="--batch-size must be >= 1, got 0"):
        positive_batch_size(argparse.Namespace(batch_size=0))


def test_a_folder_runs_where_it_was_written_for_and_the_other_runtime_is_refused(checkpoints, exported_ner):
    def args(folder, chosen=None, quantize=None):
        return argparse.Namespace(checkpoint=str(folder), runtime=chosen, quantize=quantize)

    assert runtime(args(checkpoints["ner"])) == runtime(args(checkpoints["ner"], "torch")) == "torch"
    assert runtime(args(exported_ner)) == runtime(args(exported_ner, "onnx")) == "onnx"
    with pytest.raises(ValueError, match=r"--runtime onnx: .* is not an ONNX export; write one with `dwatt export`"):
        runtime(args(checkpoints["ner"], "onnx"))
    with pytest.raises(ValueError, match=r"--runtime torch: .* is an ONNX export"):
        runtime(args(exported_ner, "torch"))
    model, _, task = inference_model(args(checkpoints["cls"], quantize="int8"))
    assert task == "cls" and any(isinstance(m, dynamic_quantized.Linear) for m in model.dwatt.modules())
    assert not isinstance(model.out_proj, dynamic_quantized.Linear)  # the head stays fp32


def test_the_default_threads_are_the_cores_no_other_process_keeps_busy(monkeypatch):
    """A command with no --threads takes the cores of its affinity that others left idle (at least one), so that its
    threads do not spin waiting for a core another process holds (benchmarks/threads.py); the console script sets it
    for OpenMP before torch starts, unless OMP_NUM_THREADS says otherwise."""
    import os
    import sys

    import psutil

    import dwatt.cli as cli

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    for busy, expected in (
        ([3.0, 5.0], 2),
        ([100.0, 2.0], 1),
        ([100.0, 100.0], 1),
        ([60.0, 60.0], 1),
        ([30.0, 20.0], 2),
    ):
        monkeypatch.setattr(psutil, "cpu_percent", lambda interval, percpu, busy=busy: busy)
        assert cli.default_threads() == expected, busy
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval, percpu: [100.0, 0.0])
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(cli, "main", lambda argv=None: 0)
    monkeypatch.setattr(sys, "argv", ["dwatt", "train"])
    with pytest.raises(SystemExit):
        cli.entry()
    assert os.environ["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's own setting is kept
    with pytest.raises(SystemExit):
        cli.entry()
    assert os.environ["OMP_NUM_THREADS"] == "2"
