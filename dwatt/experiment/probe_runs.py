"""How the probe's heads train: into its store, through the sweep, the heads of a sample stacked (`trained_runs`)."""

from __future__ import annotations

from ..execution import Execution
from .probe_types import ProbeSettings
from .store import ResultsStore
from .sweep import run_sweep


def trained_runs(
    settings: ProbeSettings, specs: list, execution: Execution, train_in_parts: int | None = None
) -> dict:
    """Train (or resume) `specs` into the probe's store, the heads of a sample stacked: their rows, by run id."""
    overrides = settings.overrides()
    sweep = dict(execution=execution, progress=settings.progress, engine="stacked", train_in_parts=train_in_parts)
    if settings.widen:  # the total is the grid so far: a rate added past an edge adds runs (`Widening`)
        sweep["progress_label"] = "runs (more if a rate is added past an edge)"
    run_sweep(specs, settings.store, settings.output_root, **sweep, **overrides)
    return ResultsStore(settings.store).finished(specs, overrides, "stacked")


__all__ = ["trained_runs"]
