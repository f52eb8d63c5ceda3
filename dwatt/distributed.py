"""Data-parallel runs under `torchrun` or `accelerate launch`: which process this is, and work split across processes.

A launcher starts one process per device and says so in the environment (`WORLD_SIZE`, `RANK`, `LOCAL_RANK`).
Training is then the `Trainer`'s own data parallelism; what this module adds is what the `Trainer` does not do for
a dwatt run: the process group exists before the `Trainer` (the feature cache is built first, on each process's
own device, its sentences split across the processes), and one process writes the results.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from accelerate import PartialState

T = TypeVar("T")


def launched_processes() -> int:
    """How many processes the launcher started (1 when run plainly), read without starting a process group."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def cpu_only() -> bool:
    """No GPU here: the `Trainer` must be told (`use_cpu`), or accelerate treats a launch on CPUs as one process
    per copy of the run instead of one data-parallel run over gloo."""
    return not torch.cuda.is_available()


def state() -> PartialState:
    """The process group as the `Trainer` sets it up (gloo on CPUs, NCCL on GPUs); started on first use, a plain
    one-process state when no launcher started this process."""
    return PartialState(cpu=cpu_only())


def is_main_process() -> bool:
    return launched_processes() == 1 or state().is_main_process


def device() -> torch.device:
    """This process's device: its own GPU under a launcher (not every process on `cuda:0`), else the one there is."""
    if launched_processes() > 1:
        return state().device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def per_device_batch_size(global_batch_size: int, processes: int) -> int:
    """`--batch-size` is the global batch (the paper's 16 stays 16 on any number of devices): each process takes
    an equal share, so it must divide evenly."""
    if global_batch_size % processes:
        raise ValueError(
            f"--batch-size {global_batch_size} is the global batch; it must divide evenly among the {processes} "
            f"processes (each takes an equal share), e.g. --batch-size {global_batch_size // processes * processes or processes}"
        )
    return global_batch_size // processes


def split_and_gather(items: Sequence[int], compute: Callable[[list[int]], T]) -> list[tuple[list[int], T]]:
    """
    Each process computes `compute(its share of items)`, the shares taken round-robin (so sentences sorted by
    anything spread evenly), and every process receives every share with the items it covers, in process order.
    The processes do equal work, so none waits long at the gather. One process: one share, nothing sent.
    """
    processes = launched_processes()
    if processes == 1:
        return [(list(items), compute(list(items)))]
    current = state()
    mine = list(items[current.process_index :: processes])
    gathered: list = [None] * processes
    torch.distributed.all_gather_object(gathered, (mine, compute(mine)))
    return gathered


def as_the_main_process_says(value: T) -> T:
    """The main process's `value` on every process of a launch (a decision they must share, such as where a cache
    they build together lives); `value` itself when run alone."""
    if launched_processes() == 1:
        return value
    state()  # the process group
    carried = [value]
    torch.distributed.broadcast_object_list(carried, src=0)
    return carried[0]


__all__ = [
    "as_the_main_process_says",
    "cpu_only",
    "device",
    "is_main_process",
    "launched_processes",
    "per_device_batch_size",
    "split_and_gather",
    "state",
]
