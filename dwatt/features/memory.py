"""Where a feature cache goes within the memory budget (memory, or memory-mapped files on a disk that can hold them),
what a model takes, and handing freed memory back to the system as a backbone pass runs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


class CacheTooLargeError(ValueError):
    """A feature cache that fits neither in memory nor on the disk it would spill to, or a model that does not fit the
    memory budget (`--max-memory`) at all."""


MEMORY_SHARE = 0.5  # a cache may take at most this share of the available memory; beyond it, it is memory-mapped
# What a budget keeps beside the weights and the caches: the process's own (torch and the data, about 0.5 GiB) and a
# caching batch's hidden states (0.7 GiB for 64 sentences on a 28-layer, 1536-wide model in bf16), then training's.
WORKING_MARGIN = 2 << 30


def model_nbytes(model) -> int:
    """What a model's weights and buffers take in memory (not those offloaded to disk by a `device_map`)."""
    tensors = [t for t in (*model.parameters(), *model.buffers()) if not t.is_meta]
    return sum(t.numel() * t.element_size() for t in {id(t): t for t in tensors}.values())


def cache_storage(
    nbytes: int,
    spill_folder: str | Path,
    max_memory: int | None = None,
    model_bytes: int = 0,
    cached_bytes: int = 0,
    on_disk: bool = False,
) -> Path | None:
    """
    Where caches of `nbytes` go: memory (`None`) when they fit, else memory-mapped files in `spill_folder` when its
    disk has room for them (plus 1 GiB), else `CacheTooLargeError` saying what to change. They fit in memory within
    `MEMORY_SHARE` of the available memory (the rest is the margin for training, the model and the other caches) and,
    with a budget (`max_memory`, bytes, for the whole process), within what the model (`model_bytes`), the caches
    already in memory (`cached_bytes`) and a working margin leave of it; a model that leaves nothing of the budget is
    refused. `on_disk`: to files whatever their size (kept, so that another process, or a stopped build's rerun, reads
    them instead of running the backbone again).
    """

    import psutil

    available = psutil.virtual_memory().available
    allowed = MEMORY_SHARE * available
    if max_memory is not None:
        left = max_memory - model_bytes - WORKING_MARGIN
        if left < 0:
            raise CacheTooLargeError(
                f"--max-memory {gib(max_memory)}: the model alone takes {gib(model_bytes)}, and training needs about "
                f"{gib(WORKING_MARGIN)} beside it; give a budget of at least {gib(model_bytes + WORKING_MARGIN)}, or a "
                "backbone saved in a smaller dtype (bfloat16)"
            )
        allowed = min(allowed, left - cached_bytes)
    if nbytes <= allowed and not on_disk:
        return None
    folder = Path(spill_folder)
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if nbytes + (1 << 30) <= free:
        return folder
    budget = (
        f"the {gib(allowed)} --max-memory leaves"
        if max_memory is not None
        else (f"{MEMORY_SHARE:.0%} of the {gib(available)} of memory available")
    )
    raise CacheTooLargeError(
        f"the feature cache needs {gib(nbytes)}: more than {budget} and more than the {gib(free)} free on the disk "
        f"of {folder}; fuse fewer layers (--layers every:4), score fewer dev sentences (--dev-sentences), or train "
        "without the cache (--no-cache)"
    )


def gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def release_freed_memory() -> None:
    """Hand the memory freed since the last call back to the system, where the C library can (glibc's `malloc_trim`).
    A backbone pass allocates and frees a few large tensors per batch; glibc keeps such freed blocks (up to 32 MiB
    each) in its heap for reuse, where they fragment and add up batch after batch (measured: a 10x larger dev split
    left 300 MB more anonymous memory after caching it to disk). Trimmed after each batch, the process holds what it
    uses, whatever the number of sentences."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        import ctypes
        import ctypes.util

        try:
            _MALLOC_TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM = None


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def anonymous_bytes() -> int | None:
    """The process's resident memory that no file backs (resident less shared pages, `/proc/self/statm`); None where
    the system does not say (not Linux)."""
    try:
        with open("/proc/self/statm") as statm:
            resident, shared = map(int, statm.read().split()[1:3])
    except (OSError, ValueError):
        return None
    return (resident - shared) * _PAGE_SIZE


class FreedMemoryRelease:
    """`release_freed_memory` once the process's anonymous memory has grown by `slack` bytes since the last release:
    a loop of batches that calls `release()` after each stays within `slack` of what it uses, without handing the
    blocks back (and faulting them in again) on every batch, which about doubled a small probe's training and dev
    passes (2.1 to 4.0 s, 3 runs each; within noise of never releasing at a slack of 32 or 64 MiB)."""

    def __init__(self, slack: int = 32 << 20):
        self.slack, self.level = slack, None

    def release(self) -> None:
        now = anonymous_bytes()
        if now is not None and (self.level is None or now > self.level + self.slack):
            release_freed_memory()
            self.level = anonymous_bytes()


def preallocated(path: Path, nbytes: int) -> None:
    """A fresh file of `nbytes` at `path`, its blocks reserved now where the system can (a disk that cannot hold the
    cache refuses it here, with a message, rather than failing a write into the mapping later, which kills the
    process)."""
    with open(path, "wb") as handle:
        try:
            if nbytes and hasattr(os, "posix_fallocate"):
                os.posix_fallocate(handle.fileno(), 0, nbytes)
            else:
                handle.truncate(nbytes)
        except OSError as error:
            if error.errno in (95, 22):  # EOPNOTSUPP, EINVAL: a file system that reserves nothing ahead
                handle.truncate(nbytes)
                return
            handle.close()
            path.unlink(missing_ok=True)
            raise CacheTooLargeError(
                f"the feature cache {path} needs {gib(nbytes)} on its disk, which cannot hold it ({error.strerror}); "
                "free space there, fuse fewer layers (--layers every:4) or train without the cache (--no-cache)"
            ) from error
