"""
Learning-rate grids that contain their optimum. A choice on dev at an edge of the rates tried says the best rate may
lie beyond it; the grid then grows by the next rate on that side, at the grid's own steps, is trained and chosen
again, until every choice is interior or a stated limit is reached (`Widening`).
"""

from __future__ import annotations

import math
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
    """How far a grid may grow: at most `steps` rates past each edge of the grid asked for, and never past
    `RATE_FLOOR`..`RATE_CEILING`. `added` records the rates each side gained; `limits` says, by edge, why a choice
    still standing there was not widened further."""

    steps: int = 3
    added: dict[str, list[float]] = field(default_factory=lambda: {edge: [] for edge in EDGES})
    limits: dict[str, str] = field(default_factory=dict)

    def more(self, tried: list[float], edges: set[str]) -> list[float]:
        """The rates to add now, one for each edge in `edges` (where some choice sits), within the limits; an edge that
        may not widen further is recorded in `limits` instead."""
        rates = []
        for edge in EDGES:
            if edge not in edges:
                self.limits.pop(edge, None)
                continue
            rate = next_rate(tried, edge)
            if len(self.added[edge]) >= self.steps:
                self.limits[edge] = (
                    f"{self.steps} rate{'s' * (self.steps != 1)} added past the grid asked for (--widen)"
                )
            elif not RATE_FLOOR <= rate <= RATE_CEILING:
                self.limits[edge] = f"the next rate, {rate:g}, lies outside {RATE_FLOOR:g}..{RATE_CEILING:g}"
            else:
                self.added[edge].append(rate)
                rates.append(rate)
        return rates


__all__ = ["EDGES", "RATE_CEILING", "RATE_FLOOR", "Widening", "edge_of", "next_rate"]
