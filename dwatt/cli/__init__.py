"""`dwatt` command line: train, evaluate, predict, export, push, sweep, probe and report, one module per command.

Each command's module registers its parser (`register(commands)`, which sets the handler) and runs it (`run(args)`);
reading the command line imports neither torch nor transformers, and each command imports what it runs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from importlib import import_module

COMMANDS = (
    "train",
    "evaluate",
    "predict",
    "export",
    "push",
    "sweep",
    "probe",
    "rank_layers",
    "report",
    "rank_report",
    "readout_report",
)


# What a command stopped part-way leaves, and how to go on.
STOPPED = {
    "sweep": "every run finished so far is in the results file: run the same command again to resume after it",
    "probe": "every head finished so far is kept: run the same command again to resume after it",
    "train": "run the same command again (a run saved with --checkpoint-every-epoch resumes with --resume)",
    None: "nothing it writes was left half-written; run the same command again",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dwatt", description="Depth-Wise Attention layer fusion: train, evaluate, predict"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        import_module(f"{__name__}.{command}").register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    from ..console import quiet_libraries
    from ..errors import FolderBusyError, HubError, SweepBusyError, first_line

    parser = build_parser()
    args, unparsed = parser.parse_known_args(argv)
    if unparsed and args.command == "predict" and not any(arg.startswith("-") for arg in unparsed):
        args.sentences += unparsed  # sentences after an option: `dwatt predict MODEL --quantize int8 "A sentence ."`
    elif unparsed:
        parser.error(f"unrecognized arguments: {' '.join(unparsed)}")
    if getattr(args, "verbosity", "normal") != "verbose":
        quiet_libraries()
    try:
        if sys.stdout is None or sys.stdout.closed:
            raise ValueError("standard output is closed; give the command somewhere to write (a file, a pipe)")
        use_threads(getattr(args, "threads", None))
        return args.handler(args)
    except BrokenPipeError:
        # the reader of a pipe stopped (`| head`): what is left to write goes nowhere, and the exit says so
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(
            f"dwatt {args.command}: error: standard output was closed before everything was written", file=sys.stderr
        )
        return 2
    except (ValueError, OSError, HubError, SweepBusyError, FolderBusyError) as error:
        # One line, whatever failed (a bad argument, a file, the Hub): what happened and, where known, what to do.
        print(f"dwatt {args.command}: error: {first_line(error)}", file=sys.stderr)
        return 2


def use_threads(count: int | None) -> None:
    """`--threads`: the CPU threads of torch's and onnxruntime's kernels (OpenMP reads the variable when torch starts;
    a torch already imported is told directly). On a shared machine, one thread per process avoids the slow-down of
    threads waiting for each other's cores."""
    if count is None:
        return
    if count < 1:
        raise ValueError(f"--threads must be >= 1, got {count}")
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(count)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(count)


# How long `default_threads` watches the cores before a command starts (torch's import takes longer).
BUSY_SAMPLE_SECONDS = 0.2


def default_threads() -> int:
    """The CPU threads a command takes when neither `--threads` nor OMP_NUM_THREADS says: the cores this process may
    run on (its affinity) that no other process kept busy over the last `BUSY_SAMPLE_SECONDS`, at least one. Threads
    that wait for cores another process holds spin and slow each other down several times over
    (benchmarks/threads.py); alone, every core, as before."""
    import psutil

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    try:
        busy = psutil.cpu_percent(interval=BUSY_SAMPLE_SECONDS, percpu=True)
        free = sum(1 - busy[core] / 100 for core in cores if core < len(busy))
    except (OSError, RuntimeError):  # no per-core figures here: every core
        free = len(cores)
    return max(1, min(len(cores), math.floor(free + 0.5)))


def entry() -> None:
    """The `dwatt` console script: `main` (its threads chosen by `default_threads` unless the command line or the
    environment says), and for the commands that only read (predict, evaluate) an exit that skips the interpreter's
    teardown of torch and transformers, about a second of a short command, once the output is flushed (training
    commands exit the usual way, closing what they opened)."""
    if "OMP_NUM_THREADS" not in os.environ:  # read by torch's OpenMP when it starts; `--threads` still overrides
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(default_threads())
    try:
        code = main()
    except KeyboardInterrupt:  # Ctrl-C: one line that says what is kept and how to go on, not a traceback
        command = next((arg for arg in sys.argv[1:] if arg in COMMANDS), "")
        print(
            f"\ndwatt {command}: stopped (Ctrl-C); {STOPPED.get(command, STOPPED[None])}".replace("dwatt :", "dwatt:"),
            file=sys.stderr,
        )
        sys.exit(130)
    if len(sys.argv) > 1 and sys.argv[1] in ("predict", "evaluate"):
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (BrokenPipeError, ValueError):
                code = code or 2
        os._exit(code)
    sys.exit(code)
