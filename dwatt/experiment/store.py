"""The results store: one JSONL file, one row per finished run, and what makes two rows the same run.

A run's identity is everything that changes its numbers (`run_settings`: the whole configuration but where it writes
and what it prints, the backbone and data folder by their portable names, the backbone's weights and configuration by
their sha256 (`backbone_fingerprint`), and the engine that trained it). A finished run is appended as one line, the
rows already there untouched (an append costs the same in a store of ten rows as in one of ten thousand); a crash in
the middle of a write leaves at most a last line without its line end, which the reader leaves out (that run was not
finished) and the next append cuts off. A restarted sweep skips the runs the store holds with the same identity and re-does the one that was interrupted; a row
with the run's id but other settings (another dev subset, test scored or not, another cache dtype, data folder or
backbone of the same name) is not that run, and the store refuses to mix the two, naming the difference.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ..data.files import json_objects
from ..fingerprints import backbone_fingerprint, config_digest, run_fingerprints
from ..portable import backbone_folder, portable_path
from ..run_config import NOT_DEFINING, RunConfig
from ..tasks import TASKS
from .grid import ENGINE_ALIASES, RunSpec, engines_for


def run_settings(config: dict) -> dict:
    """What a run's numbers depend on, from its configuration (a `RunConfig` as a dict, or a results row's `config`):
    every field but `NOT_DEFINING`, the backbone and data folder by their portable names (`portable_path`), and the
    fields a row's code did not know yet at today's defaults, so that rows written before a field existed read as
    today's runs."""
    settings = {key: value for key, value in (asdict(RunConfig()) | config).items() if key not in NOT_DEFINING}
    task = settings["task"]
    if task in TASKS:  # as `RunConfig.validate` fills them
        settings["dataset"] = TASKS[task].dataset_for(settings["dataset"], settings["data_dir"])
        settings["batch_size"] = settings["batch_size"] or TASKS[task].batch_size
    settings["backbone"] = portable_path(backbone_folder(settings["backbone"]))
    settings["data_dir"] = portable_path(settings["data_dir"])
    return settings


def requested_settings(spec: RunSpec, run_overrides: dict) -> dict:
    """`run_settings` of the run `spec` asks for, with its defaults filled in as the run fills them (`validate`), and
    what it reads by content: its backbone's and data folder's fingerprints (`run_fingerprints`)."""
    config = spec.run_config(".", **run_overrides)
    config.validate()
    return run_settings(asdict(config)) | run_fingerprints(config.backbone, config.data_dir)


def row_settings(row: dict, backbone: str | None = None) -> dict:
    """`run_settings` of a store row: from the configuration the run recorded, or, for a row without one, its spec;
    with its backbone's and data folder's fingerprints where the row records them. A fingerprint taken the earlier way
    (config.json's bytes) of `backbone`, the folder the requested run reads as it stands here, reads as today's."""
    config = row.get("config")
    if not isinstance(config, dict):
        config = asdict(RunSpec(**row["spec"]).run_config("."))
    fingerprint = row.get("backbone_sha256")
    if (
        backbone is not None
        and fingerprint is not None
        and fingerprint == backbone_fingerprint(backbone, verbatim=True)
    ):
        fingerprint = backbone_fingerprint(backbone)
    return run_settings(config) | {"backbone_sha256": fingerprint, "data_sha256": row.get("data_sha256")}


# What rows record of what a run read by content (`run_fingerprints`); a row written before it recorded one of them
# is judged by the rest.
FINGERPRINTS = ("backbone_sha256", "data_sha256")


def same_run(theirs: dict, mine: dict) -> bool:
    """Whether a row's settings are the requested run's; a fingerprint a row from before rows recorded it lacks
    (`FINGERPRINTS`) is judged by the rest."""
    theirs = theirs | {key: mine.get(key) for key in FINGERPRINTS if key in mine and theirs.get(key) is None}
    return theirs == mine


def row_engine(row: dict) -> str:
    """The engine that trained a row's run (by its name today: "budgets" rows are "stacked" ones); rows written before
    runs recorded it came from the `Trainer`."""
    engine = row.get("engine") or "trainer"
    return ENGINE_ALIASES.get(engine, engine)


def differences(theirs: dict, mine: dict) -> str:
    """`key: A there, B here` for every key whose values differ, the way a refusal names them."""
    keys = sorted(key for key in theirs.keys() | mine.keys() if theirs.get(key) != mine.get(key))
    return "; ".join(f"{key}: {theirs.get(key)!r} there, {mine.get(key)!r} here" for key in keys)


class StoreConflictError(ValueError):
    """A store holds a run of the requested id with other settings: one store keeps one version of each run."""


class ResultsStore:
    """An append-only JSONL file of finished runs, a line each (`append`)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def rows(self) -> list[dict]:
        if not self.path.exists():
            return []
        rows = []
        for number, row in json_objects(self.path, "row", cut_off_tail=True):
            if not isinstance(row.get("run_id"), str):
                raise ValueError(
                    f"{self.path}:{number}: a store row needs a 'run_id' (is this a dwatt sweep's store?)"
                )
            rows.append(row)
        return rows

    def done(self) -> set[str]:
        return {row["run_id"] for row in self.rows()}

    def finished(
        self, specs: list[RunSpec], run_overrides: dict | None = None, engine: str = "auto", strict: bool = True
    ) -> dict[str, dict]:
        """The row of each spec that the store holds with the spec's identity: its id, its settings
        (`requested_settings` with `run_overrides`) and an engine `engine` would train it with (`engines_for`).
        A row with a spec's id and other settings raises `StoreConflictError` naming the difference, where the
        sweep would otherwise either skip a run it never made or store two versions of one run; with `strict=False`
        (another store the sweep only reads) such a row is another run, and the spec is not finished there."""
        by_id: dict[str, list[dict]] = {}
        for number, row in enumerate(self.rows(), start=1):
            by_id.setdefault(row["run_id"], []).append(row | {"_line": number})
        finished = {}
        for spec in specs:
            rows = by_id.get(spec.run_id)
            if not rows:
                continue
            wanted = requested_settings(spec, run_overrides or {})
            engines = engines_for(spec, engine, (run_overrides or {}).get("use_cache", True))
            for row in rows:
                try:
                    theirs = row_settings(row, spec.backbone)
                except (KeyError, TypeError):
                    raise ValueError(
                        f"{self.path}:{row['_line']}: row {spec.run_id} has neither a 'config' nor a valid 'spec'"
                    ) from None
                if same_run(theirs, wanted) and row_engine(row) in engines:
                    finished[spec.run_id] = {k: v for k, v in row.items() if k != "_line"}
                    break
            else:
                if not strict:
                    continue
                row = rows[0]
                theirs = row_settings(row, spec.backbone) | {"engine": row_engine(row)}
                # the engine is named only where the row's is not one this sweep accepts
                mine = wanted | {"engine": row_engine(row) if row_engine(row) in engines else " or ".join(engines)}
                raise StoreConflictError(
                    f"{self.path}:{row['_line']}: run {spec.run_id} is there with other settings ({differences(theirs, mine)}); "
                    "a store keeps one version of each run: give this command another --results, or remove those rows"
                )
        return finished

    def append(self, row: dict) -> None:
        """`row` written as one line at the store's end, in one write handed to the system before this returns (a
        crash of this process loses nothing written; like dwatt's other writes it does not wait for the disk). A last
        line without its line end is ended first where it is a whole row (a file another tool wrote), and cut off
        where it does not parse (a write a crash cut off), so that rows never run together."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(row, sort_keys=True, default=str) + "\n").encode()
        with self.path.open("ab+") as handle:
            end, tail = unended_tail(handle)
            if tail and _parses(tail):
                line = b"\n" + line
            elif tail:
                handle.truncate(end)
            handle.write(line)


def _parses(text: bytes) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def unended_tail(handle, chunk: int = 1 << 16) -> tuple[int, bytes]:
    """Where the last line end of the file open in `handle` (binary, readable) falls (the size up to and including it;
    0 where it has none), and the bytes after it: b"" where the file ends a line. Read from the end, a chunk at a time."""
    size = handle.seek(0, 2)
    if size == 0:
        return 0, b""
    handle.seek(size - 1)
    if handle.read(1) == b"\n":  # the usual case: one byte read
        return size, b""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        handle.seek(start)
        found = handle.read(end - start).rfind(b"\n")
        if found >= 0:
            end = start + found + 1
            break
        end = start
    handle.seek(end)
    return end, handle.read(size - end)


def shard_results_path(results: str | Path, index: int, count: int) -> Path:
    """Each shard's own store beside the one a whole sweep writes: results.jsonl -> results.shard-0-of-4.jsonl."""
    results = Path(results)
    return results.with_name(f"{results.stem}.shard-{index}-of-{count}{results.suffix}")


__all__ = [
    "FINGERPRINTS",
    "ResultsStore",
    "StoreConflictError",
    "backbone_fingerprint",
    "config_digest",
    "differences",
    "requested_settings",
    "row_engine",
    "row_settings",
    "run_settings",
    "same_run",
    "shard_results_path",
]
