"""What every speed benchmark records about its machine, and how it writes its results (JSON + Markdown)."""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch


def environment(device: torch.device | None = None) -> dict:
    """The versions and the device; on a CPU also whether its int8 kernels multiply 8-bit activations exactly (VNNI:
    `dwatt.serving.quantization.full_range_activations_exact`), which decides PyTorch's int8 way and its speed."""
    cuda = torch.cuda.is_available() if device is None else device.type == "cuda"
    found = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device_name": torch.cuda.get_device_name(device) if cuda else f"cpu ({torch.get_num_threads()} threads)",
    }
    if not cuda:
        from dwatt.serving.quantization import full_range_activations_exact

        found["int8_8bit_activations_exact"] = full_range_activations_exact()
    return found


def cpu_facts() -> dict:
    """The CPU's model name and whether it has the bf16 and AMX instructions that make bf16 matmuls fast."""
    flags, name = set(), platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "cpu": name,
        "cores": os.cpu_count(),
        "avx512_bf16": "avx512_bf16" in flags,
        "amx_bf16": "amx_bf16" in flags,
    }


def command(script: str, argv: list[str] | None) -> str:
    """The command line that produced a result, as it would be typed from the repository root, naming no folder of
    this machine (`dwatt.portable.portable_command`)."""
    from dwatt.portable import portable_command

    return " ".join(
        [f"python benchmarks/{script}", *map(shlex.quote, portable_command(sys.argv[1:] if argv is None else argv))]
    )


def command_with_heads(script: str, argv: list[str] | None) -> str:
    """`command`, each `--head NAME=FOLDER`'s folder made portable too (`portable_command` sees only whole paths)."""
    from dwatt.portable import portable_path

    given = sys.argv[1:] if argv is None else argv
    heads = [
        f"{part.split('=', 1)[0]}={portable_path(part.split('=', 1)[1])}"
        if "=" in part and not part.startswith("-")
        else part
        for part in given
    ]
    return command(script, heads)


def commands_line(commands: list[str]) -> str:
    """The Markdown line naming the command lines a result file's rows came from."""
    return "Commands: " + ", ".join(f"`{command}`" for command in commands) + "\n"


def rotated_rounds(names, rounds: int):
    """`(round, name)` for every name once a round, the order rotated from round to round, so that no name always
    runs first or right after the same other and slow drift of the machine falls on every name alike."""
    names = list(names)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            yield round_index, name


AGAIN = " again"


def interleaved_timings(settings: dict[str, Callable[[], object]], rounds: int, control: str, warmup: int = 0) -> dict:
    """Seconds of each setting over `rounds` rotated rounds (`rotated_rounds`), with `control` timed a second time
    each round under its own name (`control + AGAIN`): the two copies of one setting differ by the machine's noise
    alone, so their ratio (`noise_control`, 1.0 on a quiet machine) says how far to trust the other ratios. Warm-up
    rounds run first, untimed. Returns `{"seconds": {name: [per round]}, "median": {name: s}, "noise_control": r}`."""
    settings = dict(settings) | {control + AGAIN: settings[control]}
    for _, name in rotated_rounds(settings, warmup):
        settings[name]()
    seconds = {name: [] for name in settings}
    for _, name in rotated_rounds(settings, rounds):
        started = time.perf_counter()
        settings[name]()
        seconds[name].append(time.perf_counter() - started)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    return {"seconds": seconds, "median": median, "noise_control": median[control + AGAIN] / median[control]}


def write(output: str | Path, stem: str, result: dict, markdown: str) -> None:
    """`<stem>.json` and `<stem>.md` in `output`, and the Markdown on stdout."""
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    (output / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (output / f"{stem}.md").write_text(markdown)
    print(markdown)
