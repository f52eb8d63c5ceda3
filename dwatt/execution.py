"""How runs train, as the code that plans, resumes and stores them sees it: the lab's one seam with the library.

`dwatt.experiment` (grids, sweeps, the probe) decides which runs to train and keeps their results; it imports no
training code (an import-linter contract in pyproject.toml) and is handed an `Execution` instead:
`dwatt.training.EXECUTION` trains for real (the command line hands it in), a test hands in its own. A run is asked
for by its `RunConfig` and answers with its `RunResults`, the row its store keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

from .run_config import RunConfig


class RunResults(TypedDict, total=False):
    """What a finished run reports (its `results.json`, its row in a store); the fields the lab reads. Every run has
    its `config`; the scores are its task's (`best_dev_<score>`, `test_scores[<score>]`, `Task.score`)."""

    config: dict[str, Any]  # the `RunConfig` as run (`dataclasses.asdict`)
    task: str
    seed: int
    engine: str  # "trainer" (the `Trainer`, alone) or "stacked" (trained together)
    best_epoch: int
    last_epoch: int
    best_dev_f1: float
    best_dev_accuracy: float
    best_dev_perplexity: float
    test_scores: dict[str, float]  # where the run scored test
    dev_curve: list[float]
    num_dev_sentences: int  # NER
    num_dev_examples: int  # text classification
    train_pool_size: int
    backbone_layers: int  # the backbone's depth
    trained_together_runs: int  # the runs of its stack
    cpu_seconds: float  # its process's CPU time since its stack began
    wall_seconds: float
    ensembles: list[dict[str, Any]]  # the probe's ensembles its stack built (`dwatt.schema.ENSEMBLES_FIELD`)


class TrainsAlone(Protocol):
    def __call__(self, config: RunConfig) -> RunResults: ...


class TrainsTogether(Protocol):
    def __call__(
        self, configs: Sequence[RunConfig], *, train_in_parts: int | None = None, build_ensembles: bool = True
    ) -> list[RunResults]: ...


class Execution(Protocol):
    """The two ways a run trains. `alone(config)`: one run, its results (`dwatt.training.run`: the `Trainer`).
    `together(configs, train_in_parts=None, build_ensembles=True)`: FE runs of one sample trained together on one
    backbone pass, their results in order, `train_in_parts` heads at a time where given, heads on one layer each
    building the probe's ensembles unless `build_ensembles` is off (`dwatt.training.run_together`)."""

    @property
    def alone(self) -> TrainsAlone: ...

    @property
    def together(self) -> TrainsTogether: ...


@dataclass(frozen=True)
class ExecutionOf:
    """An `Execution` made of two functions: how `dwatt.training` trains (`EXECUTION`), or a test's fakes."""

    alone: TrainsAlone
    together: TrainsTogether


__all__ = ["Execution", "ExecutionOf", "RunResults", "TrainsAlone", "TrainsTogether"]
