"""What every speed benchmark records about its machine, and how it writes its results (JSON + Markdown)."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch


def environment(device: torch.device | None = None) -> dict:
    cuda = torch.cuda.is_available() if device is None else device.type == "cuda"
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device_name": torch.cuda.get_device_name(device) if cuda else f"cpu ({torch.get_num_threads()} threads)",
    }


def command(script: str, argv: list[str] | None) -> str:
    """The command line that produced a result, as it would be typed from the repository root, naming no folder of
    this machine (`dwatt.portable.portable_command`)."""
    from dwatt.portable import portable_command

    return " ".join([f"python benchmarks/{script}", *portable_command(sys.argv[1:] if argv is None else argv)])


def rotated_rounds(names, rounds: int):
    """`(round, name)` for every name once a round, the order rotated from round to round, so that no name always
    runs first or right after the same other and slow drift of the machine falls on every name alike."""
    names = list(names)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            yield round_index, name


def write(output: str | Path, stem: str, result: dict, markdown: str) -> None:
    """`<stem>.json` and `<stem>.md` in `output`, and the Markdown on stdout."""
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    (output / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (output / f"{stem}.md").write_text(markdown)
    print(markdown)
