"""How dwatt writes files: whole or not at all (write to a temporary neighbour, then rename over the target, so a
crash never leaves a half-written results file, store or checkpoint record; folders such as a checkpoint or an export
are written into a scratch neighbour and swapped in whole), and readable by others as files
usually are (`give_usual_modes`)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path


def write_text_atomically(path: str | Path, text: str) -> None:
    """`text` written to a temporary neighbour, then renamed over `path`; a write that fails (a full disk) removes
    its temporary file and leaves `path` as it was."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_json_atomically(path: str | Path, payload: dict) -> None:
    """`payload` as indented JSON with sorted keys (objects it cannot encode as their `str`)."""
    write_text_atomically(path, json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


def scratch_folder(output: Path) -> Path:
    """A scratch folder beside `output` for this process; those an earlier, killed write left are removed."""
    for stale in output.parent.glob(f".{output.name}.*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)
    return output.parent / f".{output.name}.{os.getpid()}.tmp"


def replace_folder(new: Path, target: Path) -> None:
    """`new` renamed to `target`; an existing `target` is exchanged with `new` in one step where the system can
    (Linux's renameat2 with RENAME_EXCHANGE), else moved aside first, then removed."""
    if not target.exists():
        os.replace(new, target)
        return
    if not _exchange(new, target):
        aside = target.parent / f".{target.name}.{os.getpid()}.old.tmp"
        os.replace(target, aside)
        os.replace(new, target)
        new = aside
    shutil.rmtree(new, ignore_errors=True)


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically (renameat2, RENAME_EXCHANGE); False where the system cannot."""
    import ctypes
    import ctypes.util

    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_current_directory, rename_exchange = -100, 2
    return renameat2(at_current_directory, os.fsencode(first), at_current_directory, os.fsencode(second),
                     rename_exchange) == 0


def read_json(path: str | Path):
    """A JSON file's content; a file that does not parse is named with the line (ValueError), one that cannot be
    read with the reason (OSError)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: not JSON ({error.msg})") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 ({error.reason})") from None


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


__all__ = ["give_usual_modes", "read_json", "replace_folder", "scratch_folder", "usual_mode", "write_json_atomically", "write_text_atomically"]
