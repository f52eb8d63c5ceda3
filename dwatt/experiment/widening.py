"""
Learning-rate grids that contain their optimum. A choice on dev at an edge of the rates tried says the best rate may
lie beyond it; the grid then grows by the next rate on that side, at the grid's own steps, is trained and chosen
again, until every choice is interior or a stated limit is reached (`Widening`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

# The rates a grid never widens past: beyond them AdamW on a head either cannot move or diverges at once.
RATE_FLOOR, RATE_CEILING = 1e-7, 1.0
EDGES = ("largest", "smallest")


def edge_of(best: float, tried: list[float]) -> str:
    """`"largest"` or `"smallest"` where `best` is that edge of `tried`, else `""` (and `""` with one rate tried: no
    grid to be at the edge of)."""
    if len(tried) < 2:
        return ""
    if math.isclose(best, max(tried)):
        return "largest"
    if math.isclose(best, min(tried)):
        return "smallest"
    return ""


def next_rate(tried: list[float], edge: str) -> float:
    """The rate one step past `edge` of `tried`, at the grid's own steps repeated: 3e-3, 1e-2 continue with 3e-2,
    then 1e-1 (each step as the one two before it); a grid of two rates steps by their ratio. Three significant
    digits, so that a rate computed twice is the same rate."""
    rates = sorted(tried)
    if len(rates) < 2:
        raise ValueError("a grid widens from at least two rates")
    if edge == "largest":
        step = rates[-2] / rates[-3] if len(rates) >= 3 else rates[-1] / rates[-2]
        rate = rates[-1] * step
    elif edge == "smallest":
        step = rates[2] / rates[1] if len(rates) >= 3 else rates[1] / rates[0]
        rate = rates[0] / step
    else:
        raise ValueError(f"an edge is one of {EDGES}, not {edge!r}")
    return float(f"{rate:.3g}")


@dataclass
class Widening:
    """How far a grid may grow: at most `steps` values past each edge of the grid asked for, and never past
    `floor`..`ceiling` (by default the learning rates a head trains with). `added` records the values each side
    gained; `limits` says, by edge, why a choice still standing there was not widened further. `unit` and `option`
    name the values and the option that sets `steps` where the limits are said."""

    steps: int = 3
    floor: float = RATE_FLOOR
    ceiling: float = RATE_CEILING
    unit: str = "rate"
    option: str = "--widen"
    added: dict[str, list[float]] = field(default_factory=lambda: {edge: [] for edge in EDGES})
    limits: dict[str, str] = field(default_factory=dict)

    def more(self, tried: list[float], edges: set[str]) -> list[float]:
        """The values to add now, one for each edge in `edges` (where some choice sits), within the limits; an edge
        that may not widen further is recorded in `limits` instead."""
        values = []
        for edge in EDGES:
            if edge not in edges:
                self.limits.pop(edge, None)
                continue
            value = next_rate(tried, edge)
            if len(self.added[edge]) >= self.steps:
                self.limits[edge] = (
                    f"{self.steps} {self.unit}{'s' * (self.steps != 1)} added past the grid asked for"
                    + (f" ({self.option})" if self.option else "")
                )
            elif not self.floor <= value <= self.ceiling:
                self.limits[edge] = f"the next {self.unit}, {value:g}, lies outside {self.floor:g}..{self.ceiling:g}"
            else:
                self.added[edge].append(value)
                values.append(value)
        return values

    def note(self) -> str:
        """What the widening did, as a clause to follow a choice: the values added, and any limit a choice stands at."""
        parts = [
            f"{', '.join(f'{value:g}' for value in values)} added {'above' if edge == 'largest' else 'below'}"
            for edge, values in self.added.items()
            if values
        ]
        parts += [f"at the {edge} {self.unit} tried: {why}" for edge, why in self.limits.items()]
        return f" ({'; '.join(parts)})" if parts else ""


def widened_choice(grid, fit: Callable[[float], tuple], widening: Widening) -> tuple[float, tuple, Widening]:
    """The value of `grid` whose `fit(value)` (a `(dev score, ...)` tuple) scores best (ties: the smaller value),
    the grid widened past the edge the best one sits at until it is inside or `widening` says it stops: the value,
    its fit and the widening."""
    fits = {value: fit(value) for value in grid}
    while True:
        tried = sorted(fits)
        best = max(tried, key=lambda value: (fits[value][0], -value))
        added = widening.more(tried, {edge_of(best, tried)} - {""})
        if not added:
            return best, fits[best], widening
        fits.update({value: fit(value) for value in added})


__all__ = ["EDGES", "RATE_CEILING", "RATE_FLOOR", "Widening", "edge_of", "next_rate", "widened_choice"]
