"""Experiment grids: the cross product of runs, one results store, resumable after an interruption.

Each run is identified by a readable `run_id` built from everything that defines it. The store is one JSONL file
(one row per finished run) rewritten whole through write-then-rename at every finished run, so a crash leaves the
previous complete file and never a half-written one; a restarted sweep skips the run ids already in the store and
re-does the one that was interrupted.

Budgets: each epoch budget (25/50/75/100) is its own run, not a prefix of the longest one, because the linear decay
of the learning rate to 0 depends on the budget; a 25-epoch prefix of a 100-epoch run is a different schedule.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from .training import RunConfig, run_ner

# Fields of a results.json that vary from one execution to the next (timing) and are kept out of comparisons.
TIMING_FIELDS = ("wall_seconds", "cache_seconds", "train_seconds", "train_examples_per_second", "environment")


@dataclass(frozen=True)
class RunSpec:
    """One run of a grid. `trial` is the seed: it fixes both the few-shot sample and the initialisation, so all
    fusions of a trial see the same sentences."""

    fusion: str
    mode: str
    n_shot: int
    epochs: int
    trial: int
    dataset: str = "conll2003"
    backbone: str | None = None
    data_dir: str | None = None

    @property
    def run_id(self) -> str:
        backbone = Path(self.backbone).name if self.backbone else "default"
        return f"{self.dataset}/{backbone}/{self.mode}/{self.fusion}/n{self.n_shot}/e{self.epochs}/t{self.trial}"

    def run_config(self, output_root: str | Path, **overrides) -> RunConfig:
        return RunConfig(
            backbone=self.backbone,
            fusion=self.fusion,
            mode=self.mode,
            dataset=self.dataset,
            data_dir=self.data_dir,
            n_shot=self.n_shot,
            epochs=self.epochs,
            seed=self.trial,
            output_dir=str(Path(output_root) / self.run_id),
            save_model=False,
            progress=False,
            **overrides,
        )


def grid(
    fusions: Iterable[str],
    modes: Iterable[str] = ("fe",),
    n_shots: Iterable[int] = (8, 16, 32, 64, 128),
    epochs: Iterable[int] = (25, 50, 75, 100),
    trials: int = 5,
    datasets: Iterable[str] = ("conll2003",),
    backbones: Iterable[str | None] = (None,),
    data_dir: str | None = None,
) -> list[RunSpec]:
    """The cross product, ordered so that every trial's runs come together (one sample, all fusions)."""
    return [
        RunSpec(fusion, mode, n, e, trial, dataset, backbone, data_dir)
        for dataset, backbone, trial, n, e, mode, fusion in itertools.product(
            datasets, backbones, range(trials), n_shots, epochs, modes, fusions
        )
    ]


class ResultsStore:
    """An append-only JSONL file of finished runs, each append an atomic rewrite (write-then-rename)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def rows(self) -> list[dict]:
        if not self.path.exists():
            return []
        rows = []
        for number, line in enumerate(self.path.read_text().splitlines(), start=1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(f"{self.path}:{number}: not a JSON row ({error.msg})") from None
        return rows

    def done(self) -> set[str]:
        return {row["run_id"] for row in self.rows()}

    def append(self, row: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps(r, sort_keys=True, default=str) for r in self.rows() + [row]]
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text("\n".join(lines) + "\n")
        os.replace(temporary, self.path)


def run_sweep(
    specs: list[RunSpec],
    results: str | Path,
    output_root: str | Path | None = None,
    runner: Callable[[RunConfig], dict] = run_ner,
    progress: bool = True,
    **run_overrides,
) -> list[dict]:
    """
    Run every spec not yet in the store at `results`, appending one row per finished run (the run's
    `results.json` plus `run_id` and the spec). Shows a progress bar over runs with an ETA. Returns all rows.
    """
    store = ResultsStore(results)
    output_root = Path(output_root) if output_root else store.path.parent / "runs"
    done = store.done()
    pending = [spec for spec in specs if spec.run_id not in done]
    if len({s.run_id for s in specs}) != len(specs):
        raise ValueError("the grid holds the same run twice")
    bar = tqdm(total=len(specs), initial=len(specs) - len(pending), desc="runs", unit="run", disable=not progress)
    for spec in pending:
        bar.set_postfix_str(spec.run_id)
        result = runner(spec.run_config(output_root, **run_overrides))
        store.append({"run_id": spec.run_id, "spec": asdict(spec)} | result)
        bar.update()
    bar.close()
    return store.rows()


def comparable(row: dict) -> dict:
    """A row without its timing fields: what two executions of the same run must agree on."""
    return {key: value for key, value in row.items() if key not in TIMING_FIELDS}


PRESETS = {
    # The paper's Figure 2/3 grid on CoNLL-03 in the FE setting.
    "conll-fe": dict(fusions=("base", "base_plus_n", "concat", "dwatt", "scalar_mix")),
    # Figure 6: FE against FT at the smallest and largest N.
    "conll-fe-vs-ft": dict(
        fusions=("base", "base_plus_n", "concat", "dwatt"), modes=("fe", "ft"), n_shots=(8, 128), epochs=(50,)
    ),
    # Minutes on a CPU: two fusions, one small sample, one short budget, one trial.
    "smoke": dict(fusions=("base", "dwatt"), n_shots=(2,), epochs=(2,), trials=1),
}

__all__ = ["PRESETS", "ResultsStore", "RunSpec", "comparable", "grid", "run_sweep"]
