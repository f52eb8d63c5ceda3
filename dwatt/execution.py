"""How runs train, as the code that plans, resumes and stores them sees it (`Execution`).

`dwatt.experiment` (grids, sweeps, the probe) decides which runs to train and keeps their results; it imports no
training code and is handed an `Execution` instead: `dwatt.training.EXECUTION` trains for real (the command line hands
it in), a test hands in its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .run_config import RunConfig


@dataclass(frozen=True)
class Execution:
    """The two ways a run trains. `alone(config)`: one run, its results (`dwatt.training.run`: the `Trainer`).
    `together(configs, train_in_parts=None, build_ensembles=True)`: FE runs of one sample trained together on one backbone
    pass, their results in order, `train_in_parts` heads at a time where given, heads on one layer each building the
    probe's ensembles unless `build_ensembles` is off (`dwatt.training.run_together`)."""

    alone: Callable[[RunConfig], dict]
    together: Callable[..., list[dict]]


__all__ = ["Execution"]
