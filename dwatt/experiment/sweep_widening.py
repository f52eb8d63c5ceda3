"""A sweep's learning-rate grids widened until they contain each choice (`dwatt sweep --widen K`).

A group is the runs of one method in one setting and trial that differ only in their learning rate (a probe's: one
layer's). Once every run of a group is held, dev chooses its rate (the best dev score; ties: the smaller rate, as
`widening.widened_choice` breaks them); where that rate is an edge of the rates the group tried, the next rate past
it (`widening.next_rate`: the grid's own steps) joins the group, at most K past each edge of the grid asked for and
never past the rates a head trains with (`widening.Widening`). The sweep trains the added runs and chooses again until
no group's choice stands at an edge or a limit says why it still does.
"""

from __future__ import annotations

from dataclasses import replace

from ..tasks import TASKS
from .grid import RunSpec
from .widening import Widening, edge_of


def dev_score(row: dict) -> float | None:
    """The dev score a run's choice is made on: its task's score at its best epoch (None where the row has none)."""
    task = TASKS[row.get("task", row["config"].get("task", "ner"))]
    return row.get(f"best_dev_{task.score}")


def rate_groups(specs: list[RunSpec]) -> dict[str, list[RunSpec]]:
    """The specs that differ only in their learning rate, keyed by the run id they share without it; a spec with no
    rate of its own (the run's default) is no grid's."""
    groups: dict[str, list[RunSpec]] = {}
    for spec in specs:
        if spec.learning_rate is not None:
            groups.setdefault(replace(spec, learning_rate=None).run_id, []).append(spec)
    return groups


def widened_specs(
    specs: list[RunSpec], asked: set[float], held: dict[str, dict], steps: int
) -> tuple[list[RunSpec], dict[str, str]]:
    """The specs to train next: for each group (`rate_groups`) whose runs `held` (run id -> results row) has all, the
    next rate past the edge its dev choice sits at, within `steps` past the grid `asked` for; and, by group, why a
    choice still at an edge was not widened further."""
    added, limits = [], {}
    for group_id, group in rate_groups(specs).items():
        scores = {spec.learning_rate: dev_score(held[spec.run_id]) for spec in group if spec.run_id in held}
        if len(scores) < len(group) or None in scores.values():
            continue  # not every rate has run yet (or a row scored no dev): nothing to choose from
        tried = sorted(scores)
        best = max(tried, key=lambda rate: (scores[rate], -rate))
        edge = edge_of(best, tried)
        if not edge:
            continue
        grid = [rate for rate in tried if rate in asked] or tried
        widening = Widening(steps=steps)
        widening.added = {
            "largest": [rate for rate in tried if rate > max(grid)],
            "smallest": [rate for rate in tried if rate < min(grid)],
        }
        added += [replace(group[0], learning_rate=rate) for rate in widening.more(tried, {edge})]
        if edge in widening.limits:
            limits[group_id] = f"at the {edge} rate tried, {best:g}: {widening.limits[edge]}"
    return added, limits


__all__ = ["dev_score", "rate_groups", "widened_specs"]
