"""Label-free measures of one layer's representations, from the states of a few hundred texts (no labels).

Each measure is a number per layer, computed from arrays of hidden states (numpy), and comes
with the direction its reference reads as better, declared here before any labelled result was compared with it
(`MEASURES`); `dwatt rank-layers` computes them all in one backbone pass (`dwatt.layer_ranking`), and the lab
measures how often each one's pick agrees with the labelled probe's (`dwatt.experiment.label_free`).

- prompt entropy (Skean et al., "Layer by Layer", ICML 2025, after Giraldo et al. 2014): the matrix entropy
  (α = 1) of one text's token Gram matrix, each token's state scaled to unit length, divided by the log of the
  number of tokens (so 1 means the tokens are orthogonal, 0 that they all point one way), averaged over texts.
  Lower reads as more compression, which that paper finds in the intermediate layers that embed best.
- dataset entropy (the same paper): the same entropy of the Gram matrix of the texts' mean-pooled states. Higher
  reads as texts told apart.
- curvature (Hosseini & Fedorenko, NeurIPS 2023; used by Skean et al.): the mean angle, in radians, between
  consecutive steps of a text's token trajectory. Lower reads as a straighter, more predictable trajectory.
- effective rank (Roy & Vetterli 2007; as RankMe, Garrido et al., ICML 2023): exp of the entropy of the normalised
  singular values of the texts' mean-pooled states. Higher reads as more dimensions used.
- intrinsic dimension (TwoNN, Facco et al., Scientific Reports 2017, maximum-likelihood form): from each text's
  two nearest neighbours among the mean-pooled states. Higher reads as the abstraction peak where transfer begins
  (Cheng et al., ICLR 2025).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Measure:
    """One label-free measure: its name in tables, whether a higher value reads as the better layer, its reference."""

    name: str
    higher_is_better: bool
    reference: str

    def ranked(self, values: dict[int, float]) -> list[int]:
        """The layers of `values` (layer -> value) best first by this measure's direction; NaN left out, ties: the
        shallower first."""
        finite = [layer for layer, value in values.items() if math.isfinite(value)]
        return sorted(finite, key=lambda layer: (-self.oriented(values[layer]), layer))

    def pick(self, values: dict[int, float]) -> int | None:
        """The layer this measure picks among `values`: the first of `ranked` (None where every value is NaN)."""
        ranked = self.ranked(values)
        return ranked[0] if ranked else None

    def oriented(self, value: float) -> float:
        """`value` turned so that higher is better (a rank correlation with a score reads alike for every measure)."""
        return value if self.higher_is_better else -value


MEASURES: dict[str, Measure] = {
    measure.name: measure
    for measure in (
        Measure("prompt_entropy", False, "Skean et al. 2025, arXiv 2502.02013"),
        Measure("dataset_entropy", True, "Skean et al. 2025, arXiv 2502.02013"),
        Measure("curvature", False, "Hosseini & Fedorenko 2023, arXiv 2311.04930"),
        Measure("effective_rank", True, "Roy & Vetterli 2007; Garrido et al. 2023, arXiv 2210.02885"),
        Measure("intrinsic_dimension", True, "Facco et al. 2017, arXiv 1803.06992; Cheng et al. 2025 (ICLR)"),
    )
}


def unit_rows(states: np.ndarray) -> np.ndarray:
    """Each row scaled to unit length (a zero row stays zero)."""
    norms = np.linalg.norm(states, axis=1, keepdims=True)
    return states / np.where(norms > 0, norms, 1.0)


def matrix_entropy(gram: np.ndarray) -> float:
    """The α = 1 matrix entropy of a positive semi-definite `gram` (its eigenvalues over their sum as a
    distribution), divided by log n for an n x n matrix: in [0, 1]. NaN below 2 x 2 or for a zero matrix."""
    size = gram.shape[0]
    eigenvalues = np.clip(np.linalg.eigvalsh(gram.astype(np.float64)), 0.0, None)
    total = eigenvalues.sum()
    if size < 2 or total <= 0:
        return math.nan
    shares = eigenvalues[eigenvalues > 0] / total
    return float(-(shares * np.log(shares)).sum() / math.log(size))


def prompt_entropy(tokens: np.ndarray) -> float:
    """One text's prompt entropy from its token states `(tokens, hidden)` (see the module's docstring)."""
    rows = unit_rows(tokens.astype(np.float64))
    return matrix_entropy(rows @ rows.T)


def dataset_entropy(pooled: np.ndarray) -> float:
    """The dataset entropy of texts' pooled states `(texts, hidden)`."""
    rows = unit_rows(pooled.astype(np.float64))
    return matrix_entropy(rows @ rows.T)


def curvature(tokens: np.ndarray) -> float:
    """One text's mean angle (radians) between consecutive steps x[k+1] - x[k] of its token states; NaN for fewer
    than three tokens or where every step is zero."""
    steps = np.diff(tokens.astype(np.float64), axis=0)
    norms = np.linalg.norm(steps, axis=1)
    kept = norms[:-1] * norms[1:] > 0
    if len(steps) < 2 or not kept.any():
        return math.nan
    cosines = (steps[:-1] * steps[1:]).sum(axis=1)[kept] / (norms[:-1] * norms[1:])[kept]
    return float(np.arccos(np.clip(cosines, -1.0, 1.0)).mean())


def effective_rank(pooled: np.ndarray) -> float:
    """exp of the entropy of the singular values of `pooled` over their sum (between 1 and min(texts, hidden))."""
    singular = np.linalg.svd(pooled.astype(np.float64), compute_uv=False)
    total = singular.sum()
    if total <= 0:
        return math.nan
    shares = singular[singular > 0] / total
    return float(math.exp(-(shares * np.log(shares)).sum()))


def intrinsic_dimension(pooled: np.ndarray) -> float:
    """TwoNN's maximum-likelihood estimate: n / sum(log(r2 / r1)) over the points whose nearest neighbour is at a
    positive distance (duplicates are left out); NaN for fewer than three such points."""
    points = np.unique(pooled.astype(np.float64), axis=0)
    if len(points) < 3:
        return math.nan
    squared = (points**2).sum(axis=1)
    distances = np.sqrt(np.clip(squared[:, None] + squared[None, :] - 2 * points @ points.T, 0.0, None))
    np.fill_diagonal(distances, np.inf)
    nearest = np.sort(distances, axis=1)[:, :2]
    kept = nearest[:, 0] > 0
    if kept.sum() < 3:
        return math.nan
    ratios = nearest[kept, 1] / nearest[kept, 0]
    return float(len(ratios) / np.log(ratios).sum())


class LayerMeasures:
    """Every measure of one layer, fed one text at a time (`add`: its token states), read at the end (`values`).
    Per-text measures are averaged as texts arrive; what needs all texts keeps one pooled vector per text."""

    def __init__(self):
        self._prompt_entropy: list[float] = []
        self._curvature: list[float] = []
        self._pooled: list[np.ndarray] = []

    def add(self, tokens: np.ndarray) -> None:
        """One text's token states `(tokens, hidden)`, special tokens and padding left out."""
        self._prompt_entropy.append(prompt_entropy(tokens))
        self._curvature.append(curvature(tokens))
        self._pooled.append(tokens.astype(np.float64).mean(axis=0))

    def values(self) -> dict[str, float]:
        """Each measure's value (`MEASURES`' names), NaN where no text gave one."""
        pooled = np.stack(self._pooled)
        return {
            "prompt_entropy": _mean(self._prompt_entropy),
            "dataset_entropy": dataset_entropy(pooled),
            "curvature": _mean(self._curvature),
            "effective_rank": effective_rank(pooled),
            "intrinsic_dimension": intrinsic_dimension(pooled),
        }


def _mean(values: list[float]) -> float:
    finite = [value for value in values if math.isfinite(value)]
    return float(np.mean(finite)) if finite else math.nan


__all__ = [
    "MEASURES",
    "LayerMeasures",
    "Measure",
    "curvature",
    "dataset_entropy",
    "effective_rank",
    "intrinsic_dimension",
    "matrix_entropy",
    "prompt_entropy",
    "unit_rows",
]
