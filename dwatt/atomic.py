"""How dwatt writes files: whole or not at all (write to a temporary neighbour, then rename over the target, so a
crash never leaves a half-written results file, store or checkpoint record), and readable by others as files
usually are (`give_usual_modes`)."""

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


def usual_mode() -> int:
    """The mode a new file gets under this process's umask (0644 under the usual 022)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def give_usual_modes(folder: str | Path) -> None:
    """Every file under `folder` gets `usual_mode()`: transformers writes `model.safetensors` 0600 (through a private
    temporary file), which a model folder copied into a service's image or a shared directory cannot be read from."""
    mode = usual_mode()
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_mode & 0o777 != mode:
            path.chmod(mode)


__all__ = ["give_usual_modes", "usual_mode", "write_json_atomically", "write_text_atomically"]
