"""The default thread count on a busy CPU: `dwatt train` as the README runs it, alone and beside a busy process.

A training command's OpenMP threads wait for each other at every kernel; where another process holds a core, the
thread on it waits for the scheduler and the others spin meanwhile, so that a 2-thread run beside a busy process can
take many times the CPU and the time of a 1-thread one. `dwatt` (the console script) now chooses its threads from the
cores no other process kept busy just before it starts (`dwatt.cli.default_threads`). This compares, as subprocesses
of the console script, in rotated rounds:

- alone: "today" (every core, `--threads` = the cores, what the default was) against "default" (no `--threads`);
- beside a busy process (one process multiplying matrices on one thread, as a grid worker does): "today", "default"
  and `--threads 1`, the advice the README gave.

Each setting's time is the median over rounds of the command's wall time; the CPU time it took (its children's user
and system time) is recorded beside. "default again" (alone) and "--threads 1 again" (busy) are noise controls: the
same command twice a round. The job is the README's main job with fewer epochs (`--epochs`, 25 in the README's):
caching the dev split's features and training are the parts threads share.

    python benchmarks/threads.py --rounds 2 --epochs 5

Writes `results/threads_cpu.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import results_files

HERE = Path(__file__).resolve().parent
BUSY = """
import torch
torch.set_num_threads(1)
a = torch.randn(512, 512)
while True:
    a = (a @ a).tanh()
"""


def train_command(epochs: int, output: Path, threads: int | None) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dwatt.cli",
        "train",
        "--epochs",
        str(epochs),
        "--no-save",
        "--quiet",
        "--output-dir",
        str(output),
        *(["--threads", str(threads)] if threads else []),
    ]


def timed(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of `command` (its own and its children's user + system time)."""
    environment = {
        key: value for key, value in os.environ.items() if key not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, env=environment, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def chosen_threads() -> int:
    """What `default_threads` chooses now, in a process of its own as the console script runs it."""
    done = subprocess.run(
        [sys.executable, "-c", "from dwatt.cli import default_threads; print(default_threads())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout.strip())


def measure(settings: dict[str, list[str]], rounds: int, control: str) -> dict:
    """`interleaved_timings` of the commands, with the median CPU seconds of each (the control's copy runs the
    control's closure: both share its CPU times)."""
    cpu = {name: [] for name in settings}

    def runner(name):
        return lambda: cpu[name].append(timed(settings[name])[1])

    timings = results_files.interleaved_timings({name: runner(name) for name in settings}, rounds, control)
    cpu_seconds = {name: statistics.median(values) for name, values in cpu.items()}
    return timings | {"cpu_seconds": cpu_seconds | {control + results_files.AGAIN: cpu_seconds[control]}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    scratch = Path(tempfile.mkdtemp(prefix="dwatt-threads-"))
    alone = {
        "today": train_command(args.epochs, scratch / "a", cores),
        "default": train_command(args.epochs, scratch / "b", None),
    }
    result = {
        "command": results_files.command("threads.py", argv),
        "environment": results_files.environment(),
        "cores": cores,
        "epochs": args.epochs,
        "rounds": args.rounds,
    }
    result["alone"] = measure(alone, args.rounds, "default") | {"default_threads": chosen_threads()}
    busy_process = subprocess.Popen([sys.executable, "-c", BUSY], env=os.environ | {"OMP_NUM_THREADS": "1"})
    try:
        time.sleep(5)  # the busy process at work
        threads = chosen_threads()
        beside = alone | {"--threads 1": train_command(args.epochs, scratch / "c", 1)}
        result["beside a busy process"] = measure(beside, args.rounds, "--threads 1") | {"default_threads": threads}
    finally:
        busy_process.kill()
    alone_ratio = result["alone"]["median"]["default"] / result["alone"]["median"]["today"]
    busy = result["beside a busy process"]["median"]
    result["ratios"] = {
        "alone: default / today": alone_ratio,
        "busy: default / --threads 1": busy["default"] / busy["--threads 1"],
        "busy: today / --threads 1": busy["today"] / busy["--threads 1"],
    }
    lines = [
        "# Threads: the default against today's and `--threads 1`",
        "",
        f"`{result['command']}` on {result['environment']['device_name']}, {cores} cores, the README's main job with "
        f"{args.epochs} epochs, median of {args.rounds} rotated rounds (wall seconds; CPU seconds beside).",
        "",
        "| where | setting | threads | wall s | CPU s |",
        "|---|---|---|---|---|",
    ]
    for where, part in (("alone", result["alone"]), ("beside a busy process", result["beside a busy process"])):
        for name, seconds in part["median"].items():
            count = {"today": cores, "--threads 1": 1}.get(
                name.removesuffix(results_files.AGAIN), part["default_threads"]
            )
            lines.append(
                f"| {where} | {name} | {count} | {seconds:.1f} | {part['cpu_seconds'].get(name, float('nan')):.1f} |"
            )
    lines += [
        "",
        f"Noise control (the same command twice a round): alone {result['alone']['noise_control']:.3f}, beside a "
        f"busy process {result['beside a busy process']['noise_control']:.3f}.",
        "",
    ]
    lines += [f"- {name}: {ratio:.2f}" for name, ratio in result["ratios"].items()]
    results_files.write(args.output, "threads_cpu", result, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
