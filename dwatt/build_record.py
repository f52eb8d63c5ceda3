"""The record of a feature cache built into a file (`BuildRecord`): what the file holds and how far its build got, so
that a stopped build resumes and a file made for other contents is built anew."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .atomic import write_json_atomically


class BuildRecord:
    """
    The progress of a feature cache built into a file, beside it (`<file>.json`): what the file holds (`holds`: the
    cache's key, shape, dtype and batch size) and how many of its batches are written. A build that stops (Ctrl-C, a
    killed process) resumes after them; a file whose record names other contents (another backbone, tokenizer, data,
    dtype or layers) is built anew, and says so; a complete one is read as it is.

    Built by several processes into the one file (`share=(rank, processes)`: each writes every `processes`-th batch),
    the file's record says how many processes build it, and each process records its own batches beside it
    (`<file>.rank<R>-of-<P>.json`); a stopped build resumes each process after its own, under the same number of
    processes (under another, it is built anew).
    """

    def __init__(self, data: Path, holds: dict, share: tuple[int, int] = (0, 1)):
        self.data, self.path, self.holds, (self.rank, self.processes) = (
            data,
            data.with_name(data.name + ".json"),
            holds,
            share,
        )
        self.own = (
            self.path
            if self.processes == 1
            else data.with_name(f"{data.name}.rank{self.rank}-of-{self.processes}.json")
        )

    def _read(self, path: Path) -> dict | None:
        try:
            stored = json.loads(path.read_text())
            int(stored["batches_done"]), stored["holds"]
            return stored
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            print(
                f"feature cache {self.data}: its record {path.name} does not parse; building it anew", file=sys.stderr
            )
            return None

    def resumable(self) -> bool:
        """The file holds these contents, complete or part-built by as many processes as this build's."""
        stored = self._read(self.path) if self.data.exists() else None
        if not stored or stored["holds"] != self.holds:
            return False
        return stored["batches_done"] == stored.get("batches") or stored.get("processes", 1) == self.processes

    def is_complete(self) -> bool:
        """The file holds every batch of these contents."""
        stored = self._read(self.path) if self.data.exists() else None
        return bool(stored) and stored["holds"] == self.holds and stored["batches_done"] == stored.get("batches")

    def batches_done(self) -> int:
        """How many of this process's batches the file already holds for these contents (0: build it from the
        start): all of them where the build is complete."""
        if not self.data.exists():
            return 0
        stored = self._read(self.path)
        if stored is None:
            return 0
        held = stored["holds"]
        if held != self.holds:
            differing = sorted(k for k in {*held, *self.holds} if held.get(k) != self.holds.get(k))
            print(
                f"feature cache {self.data}: written for other contents (differing: {', '.join(differing)}); "
                "building it anew",
                file=sys.stderr,
            )
            return 0
        if stored["batches_done"] == stored.get("batches"):
            return len(range(self.rank, stored["batches"], self.processes))
        if stored.get("processes", 1) != self.processes:  # another split of the batches: what is written is unknown
            print(
                f"feature cache {self.data}: its stopped build ran under {stored.get('processes', 1)} processes, "
                f"this one under {self.processes}; building it anew",
                file=sys.stderr,
            )
            return 0
        if self.processes == 1:
            return int(stored["batches_done"])
        own = self._read(self.own)
        return int(own["batches_done"]) if own and own["holds"] == self.holds else 0

    def save(self, done: int, total: int) -> None:
        """This process's progress: `done` of its `total` batches written."""
        write_json_atomically(
            self.own,
            {"holds": self.holds, "batches_done": done, "batches": total}
            | ({"processes": self.processes} if self.processes > 1 else {}),
        )

    def start(self, total: int) -> None:
        """A build of `total` batches by `processes` processes begins (or resumes): said in the file's record."""
        if self.processes > 1:
            write_json_atomically(
                self.path, {"holds": self.holds, "batches_done": 0, "batches": total, "processes": self.processes}
            )

    def finish(self, total: int) -> None:
        """Every process's batches are written: the file's record says complete, and the processes' own go."""
        write_json_atomically(self.path, {"holds": self.holds, "batches_done": total, "batches": total})
        for part in self.data.parent.glob(f"{self.data.name}.rank*-of-*.json"):
            part.unlink(missing_ok=True)


__all__ = ["BuildRecord"]
