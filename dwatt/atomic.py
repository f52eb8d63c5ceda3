"""How dwatt writes files: whole or not at all (write to a temporary neighbour, then rename over the target, so a
crash never leaves a half-written results file, store or checkpoint record; folders such as a checkpoint or an export
are written into a scratch neighbour and swapped in whole), and readable by others as files
usually are (`give_usual_modes`)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import FolderBusyError, first_line


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


@contextmanager
def scratch_folder(output: Path) -> Iterator[Path]:
    """A new, empty scratch folder beside `output` for this process, removed on the way out whatever happened (those
    an earlier, killed write left are removed first): a folder is written there, then swapped in (`replace_folder`).
    One process writes `output` at a time: a lock beside it (`.<name>.lock`, gone when the write ends) is held
    throughout, and a second writer is refused (`FolderBusyError`) instead of removing the first one's scratch."""
    from filelock import FileLock, Timeout

    output.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(output.parent / f".{output.name}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise FolderBusyError(
            f"{output}: another process is writing this folder now (it holds {lock.lock_file}); "
            "wait for it to end, or write elsewhere"
        ) from None
    try:
        for stale in output.parent.glob(f".{output.name}.*.tmp"):  # only a killed writer's: the lock is ours
            shutil.rmtree(stale, ignore_errors=True)
        folder = output.parent / f".{output.name}.{os.getpid()}.tmp"
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        Path(lock.lock_file).unlink(missing_ok=True)
        lock.release()


# Free space below which a failed write is taken for a full disk (numpy's "problem writing element N to file", which
# an ONNX graph's weights meet, carries no errno).
FULL_DISK_BYTES = 16 << 20


def failed_write(error: OSError, output: Path, what: str) -> OSError:
    """An error writing `output` said in one line that names it: "no space left" where the disk is full (by errno, or
    by the free space left beside it), and that nothing was replaced."""
    try:
        free = shutil.disk_usage(output.parent if output.parent.exists() else Path.cwd()).free
    except OSError:
        free = None
    said = first_line(error)
    if error.errno == errno.ENOSPC or (free is not None and free < FULL_DISK_BYTES):
        left = f"{free / 2**20:.1f} MiB free" if free is not None else "free space unknown"
        described = OSError(
            f"{output}: no space left on the device while writing {what} ({left}; the system said: "
            f"{said}); nothing was replaced: free some space and run the command again"
        )
        described.errno = errno.ENOSPC
        return described
    return OSError(f"{output}: writing {what} failed ({said}); nothing was replaced")


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
    return (
        renameat2(at_current_directory, os.fsencode(first), at_current_directory, os.fsencode(second), rename_exchange)
        == 0
    )


def read_text(path: str | Path) -> str:
    """A UTF-8 file's text; one that is not UTF-8 is named with the line of the first bad byte (ValueError)."""
    path = Path(path)
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: not UTF-8 ({error.reason})") from None


def read_json(path: str | Path):
    """A JSON file's content; a file that does not parse is named with the line (ValueError), one that cannot be
    read with the reason (OSError)."""
    path = Path(path)
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: not JSON ({error.msg})") from None


def sha256_of(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in blocks (weights files are large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


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


__all__ = [
    "FULL_DISK_BYTES",
    "failed_write",
    "give_usual_modes",
    "read_json",
    "read_text",
    "replace_folder",
    "scratch_folder",
    "sha256_of",
    "usual_mode",
    "write_json_atomically",
    "write_text_atomically",
]
