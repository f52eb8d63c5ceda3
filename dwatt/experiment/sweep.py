"""Running a grid: every run the store does not hold yet, the runs of one sample that may train together
together, one row appended per finished run; resumable after an interruption. Several sweeps may share one store
(workers of one machine, or of machines that share its file system): each trains the groups of runs no other holds
(a claim per run), and appends under a short lock, so that no run trains twice and no row is lost."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path

from filelock import FileLock, Timeout
from tqdm.auto import tqdm

from ..errors import SweepBusyError
from ..execution import Execution
from ..fingerprints import run_fingerprints
from ..portable import portable_results
from .grid import RunSpec, batches_of_runs, widest_first
from .store import ResultsStore, differences


def refuse_repeated_ids(specs: list[RunSpec]) -> None:
    """Every run of a grid has its own id (and so its own row and folder); two that share one are named."""
    seen: dict[str, RunSpec] = {}
    for spec in specs:
        if spec.run_id in seen:
            other = seen[spec.run_id]
            raise ValueError(
                f"the grid holds run {spec.run_id} twice ({differences(asdict(other), asdict(spec)) or 'the same settings'}): "
                "give backbones folders of different names, or sweep them into separate --results"
            )
        seen[spec.run_id] = spec


def done_elsewhere(
    specs: list[RunSpec], stores: tuple[str | Path, ...], run_overrides: dict | None = None, engine: str = "auto"
) -> dict[str, dict]:
    """The row of each spec that one of `stores` (read only) holds with the spec's identity (`ResultsStore.finished`);
    a row there with the spec's id and other settings is another run. A store that is not there is refused: a
    mistyped name would train again every run it holds."""
    found: dict[str, dict] = {}
    for path in stores:
        if not Path(path).is_file():
            raise FileNotFoundError(f"--done-in {path}: no such results file")
        found |= {
            run_id: row
            for run_id, row in ResultsStore(path).finished(specs, run_overrides, engine, strict=False).items()
            if run_id not in found
        }
    return found


def runs_done(
    specs: list[RunSpec],
    results: str | Path,
    done_in: tuple[str | Path, ...] = (),
    run_overrides: dict | None = None,
    engine: str = "auto",
) -> tuple[set[str], set[str]]:
    """The ids of the specs done: those the store at `results` holds, and those only the `done_in` stores hold."""
    here = set(ResultsStore(results).finished(specs, run_overrides, engine))
    return here, set(done_elsewhere(specs, done_in, run_overrides, engine)) - here


# How long a sweep waits for the store's lock, which another sweep holds only while it appends its rows: a holder
# past this is not appending (a process stopped while holding it, or an older dwatt's sweep holding it throughout).
APPEND_WAIT_SECONDS = 60.0


def store_lock(store: ResultsStore):
    """The lock a sweep holds while it appends to `store`, acquired within `APPEND_WAIT_SECONDS` or refused."""
    lock, wait = FileLock(store.path.with_name(f".{store.path.name}.lock")), APPEND_WAIT_SECONDS
    try:
        return lock.acquire(timeout=wait)
    except Timeout:
        raise SweepBusyError(
            f"{store.path}: another process has held this results file's lock ({lock.lock_file}) for over {wait:.0f} s, "
            "longer than an append takes; wait for it, or give this sweep another --results"
        ) from None


def claim_path(store: ResultsStore, spec: RunSpec) -> Path:
    """The lock file of `spec`'s claim on `store` (`claimed`)."""
    return (
        store.path.with_name(f".{store.path.name}.claims")
        / f"{hashlib.sha256(spec.run_id.encode()).hexdigest()[:24]}.lock"
    )


@contextmanager
def claimed(store: ResultsStore, group: list[RunSpec]) -> Iterator[bool]:
    """Whether this sweep holds every run of `group` (a lock per run beside the store, held until the block ends):
    False where another sweep on the store holds one of them, which then trains the group. What counts is the lock,
    not its file: a file a stopped sweep left behind holds nothing."""
    with ExitStack() as held:
        for spec in group:
            path = claim_path(store, spec)
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                held.enter_context(FileLock(path).acquire(timeout=0))
            except Timeout:
                yield False
                return
        yield True


def release_claims(store: ResultsStore, group: list[RunSpec]) -> None:
    """Remove the claim files of `group`, whose rows are in the store, while this sweep still holds them: a sweep
    that opened one before it went takes a lock on a file no longer there, then finds the runs done
    (`ResultsStore.finished`) and trains nothing. The (hidden) claims folder stays: another sweep may be about to
    take a claim in it."""
    for spec in group:
        claim_path(store, spec).unlink(missing_ok=True)


def held_elsewhere(store: ResultsStore, specs: list[RunSpec]) -> int:
    """How many of `specs` another live sweep holds a claim on now (a lock taken, not a file left behind)."""
    count = 0
    for spec in specs:
        path = claim_path(store, spec)
        if not path.exists():
            continue
        try:
            FileLock(path).acquire(timeout=0).lock.release()
        except Timeout:
            count += 1
    return count


def sweep_output_root(results: str | Path, output_root: str | Path | None = None) -> Path:
    """Where a sweep's runs get their folders: `output_root`, else `runs/` beside the results file."""
    return Path(output_root) if output_root else Path(results).parent / "runs"


def sweep_feature_cache(output_root: str | Path) -> Path:
    """The folder of a sweep's feature caches that do not fit in memory, shared by all its runs (every fusion and
    trial reads the dev and test splits' features from one file, each file named by what it holds), and by any
    later sweep or probe into the same output root."""
    return Path(output_root) / ".feature-cache"


def run_sweep(
    specs: list[RunSpec],
    results: str | Path,
    output_root: str | Path | None = None,
    *,
    execution: Execution,
    progress: bool = True,
    engine: str = "auto",
    done_in: tuple[str | Path, ...] = (),
    train_in_parts: int | None = None,
    build_ensembles: bool = True,
    progress_label: str = "runs",
    **run_overrides,
) -> list[dict]:
    """
    Run every spec not yet in the store at `results`, appending one row per finished run (the run's
    `results.json` plus `run_id` and the spec, its paths portable: `portable_results`). Shows a progress bar over runs
    with an ETA. Returns all rows.
    Several sweeps may run on one results file at once: each trains only the groups no other holds (`claimed`) and
    has not finished, and appends under the store's lock (`store_lock`).
    `execution`: how a run trains, alone or together (`dwatt.training.EXECUTION` trains them).
    `engine` (see `ENGINES`): which runs train together; the epoch budgets of one FE run do by default.
    `done_in`: other stores, only read: a run one of them holds with the same identity is not trained again (a run
    trained again elsewhere, e.g. a probe into its own store for its ensembles, keeps a grid's command replayable).
    `train_in_parts`: the heads of a group that trains together train that many at a time, each part kept as it
    ends (`run_together`), so a sweep stopped in a long group's training resumes after its last finished part.
    `build_ensembles`: a group of heads on one layer each builds the probe's ensembles where it trains the group
    whole (not where part of it is held already, here or in `done_in`); off for specs that are part of a probe's
    grid (a widening's added rates), whose "top-k" would rank their own heads alone.
    `progress_label`: the bar's name (a probe's says its grid may grow).
    """
    from ..distributed import launched_processes  # here, so that reading a sweep's options imports no torch

    if launched_processes() > 1:
        raise ValueError(
            "dwatt sweep runs under one process: torchrun/accelerate launch are for one data-parallel run "
            "(dwatt train); to spread a sweep over workers, start one `dwatt sweep --shard i/n` per worker"
        )
    store = ResultsStore(results)
    output_root = sweep_output_root(store.path, output_root)
    store.path.parent.mkdir(parents=True, exist_ok=True)
    with store_lock(store):  # refused at once where a holder is not appending
        refuse_repeated_ids(specs)
        done = set().union(*runs_done(specs, store.path, done_in, run_overrides, engine))
    pending = widest_first([spec for spec in specs if spec.run_id not in done])
    # closed however the sweep ends, so that an error is printed on a line of its own, not after the bar
    with tqdm(
        total=len(specs), initial=len(specs) - len(pending), desc=progress_label, unit="run", disable=not progress
    ) as bar:
        groups = list(batches_of_runs(pending, engine, run_overrides.get("use_cache", True)))
        # how many runs each run's group holds in the whole grid: a group trained in part builds no probe ensembles
        whole = {
            spec.run_id: len(group)
            for _, group in batches_of_runs(specs, engine, run_overrides.get("use_cache", True))
            for spec in group
        }
        # a group another sweep held is tried once more at the end: a sweep that was stopped holds nothing then
        for _ in range(2):
            left = []
            for together, group in groups:
                with claimed(store, group) as mine:
                    if not mine:  # another sweep on this store trains it
                        left.append((together, group))
                        continue
                    finished = store.finished(group, run_overrides, engine)  # by another sweep since this one began
                    todo = [spec for spec in group if spec.run_id not in finished]
                    if todo:
                        bar.set_postfix_str(
                            todo[0].run_id + (f" (+{len(todo) - 1} trained together)" if len(todo) > 1 else "")
                        )
                        configs = [
                            spec.run_config(
                                output_root,
                                feature_cache_dir=str(sweep_feature_cache(output_root)),
                                backbone_progress=progress,
                                **run_overrides,
                            )
                            for spec in todo
                        ]
                        results_of_group = (
                            execution.together(
                                configs,
                                train_in_parts=train_in_parts,
                                build_ensembles=build_ensembles and len(todo) == whole[todo[0].run_id],
                            )
                            if together
                            else [execution.alone(configs[0])]
                        )
                        fingerprints = run_fingerprints(todo[0].backbone, todo[0].data_dir)
                        with store_lock(store):
                            for spec, result in zip(todo, results_of_group):
                                row = {"run_id": spec.run_id, "spec": asdict(spec)} | fingerprints | result
                                store.append(portable_results(row, output_root))
                        bar.update(len(todo))
                    release_claims(store, group)
            groups = left
    return store.rows()


__all__ = [
    "APPEND_WAIT_SECONDS",
    "claim_path",
    "claimed",
    "done_elsewhere",
    "held_elsewhere",
    "release_claims",
    "refuse_repeated_ids",
    "run_sweep",
    "runs_done",
    "store_lock",
]
