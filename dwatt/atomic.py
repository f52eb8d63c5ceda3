"""Files written whole or not at all: write to a temporary neighbour, then rename over the target, so a crash never
leaves a half-written results file, store or checkpoint record."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_text_atomically(path: str | Path, text: str) -> None:
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def write_json_atomically(path: str | Path, payload: dict) -> None:
    """`payload` as indented JSON with sorted keys (objects it cannot encode as their `str`)."""
    write_text_atomically(path, json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


__all__ = ["write_json_atomically", "write_text_atomically"]
