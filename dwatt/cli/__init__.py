"""`dwatt` command line: train, evaluate, predict, export, push, sweep, probe and report, one module per command.

Each command's module registers its parser (`register(commands)`, which sets the handler) and runs it (`run(args)`);
reading the command line imports neither torch nor transformers, and each command imports what it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module

COMMANDS = ("train", "evaluate", "predict", "export", "push", "sweep", "probe", "report")


# What a command stopped part-way leaves, and how to go on.
STOPPED = {
    "sweep": "every run finished so far is in the results file: run the same command again to resume after it",
    "probe": "every head finished so far is kept: run the same command again to resume after it",
    "train": "run the same command again (a run saved with --checkpoint-every-epoch resumes with --resume)",
    None: "nothing it writes was left half-written; run the same command again",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dwatt", description="Depth-Wise Attention layer fusion: train, evaluate, predict")
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
        print(f"dwatt {args.command}: error: standard output was closed before everything was written", file=sys.stderr)
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


def entry() -> None:
    """The `dwatt` console script: `main`, and for the commands that only read (predict, evaluate) an exit that skips
    the interpreter's teardown of torch and transformers, about a second of a short command, once the output is
    flushed (training commands exit the usual way, closing what they opened)."""
    import os

    try:
        code = main()
    except KeyboardInterrupt:  # Ctrl-C: one line that says what is kept and how to go on, not a traceback
        command = next((arg for arg in sys.argv[1:] if arg in COMMANDS), "")
        print(f"\ndwatt {command}: stopped (Ctrl-C); {STOPPED.get(command, STOPPED[None])}".replace("dwatt :", "dwatt:"),
              file=sys.stderr)
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

