"""What a text task's label column holds, read per problem type (transformers' `problem_type`): one class name per
row (single-label), any number of class names per row (multi-label: a list, or names joined by a separator), or a
number (regression). A value that belongs to another problem type is refused naming the file, the line and the task
that reads it, so that a list or a score is never taken for a class name."""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Sequence
from pathlib import Path

from .files import DataFormatError

SINGLE_LABEL = "single_label_classification"
MULTI_LABEL = "multi_label_classification"
REGRESSION = "regression"
SEPARATORS = ("|", ";", ",")  # a multi-label cell's names are joined by the first of these the file's cells use


def _as_list(value) -> list | None:
    """A list, or a string written as one (JSON, or Python's repr as pandas writes a list column); else None."""
    if isinstance(value, list):
        return value
    if isinstance(value, str) and value.strip().startswith("[") and value.strip().endswith("]"):
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(value.strip())
            except (ValueError, SyntaxError):
                continue
            if isinstance(parsed, list):
                return parsed
    return None


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def separator_of(values: Sequence) -> str | None:
    """The separator of a file's multi-label cells written as text: the first of `SEPARATORS` any cell holds."""
    texts = [v for v in values if isinstance(v, str) and _as_list(v) is None]
    return next((s for s in SEPARATORS if any(s in text for text in texts)), None)


def multi_label_names(value, separator: str | None) -> list[str]:
    """The class names of one multi-label cell: its list, or its text split at `separator` (an empty cell: none)."""
    listed = _as_list(value)
    if listed is None:
        text = "" if value is None else str(value)
        listed = text.split(separator) if separator else [text]
    names = [str(name).strip() for name in listed]
    return sorted(set(filter(None, names)), key=names.index)


def check_single_label(path: Path, numbered_values: Sequence[tuple[int, object]]) -> None:
    """Refuse a single-label column whose cells are lists (multi-label data) or scores (regression data)."""
    for number, value in numbered_values:
        if _as_list(value) is not None:
            raise DataFormatError(
                f"{path}:{number}: the label {value!r} is a list: texts with several labels are multi-label "
                "classification; run with --task multilabel"
            )
    numbers = [_number(value) for _, value in numbered_values]
    if numbers and all(n is not None for n in numbers) and any(n != int(n) for n in numbers):
        number, value = next((nv for nv, n in zip(numbered_values, numbers) if n != int(n)))
        raise DataFormatError(
            f"{path}:{number}: the label {value!r} is a fractional number, as are others "
            f"({len(set(numbers))} distinct values from {min(numbers):g} to {max(numbers):g}): a score per text is "
            "regression; run with --task regression (or name the classes)"
        )


def regression_targets(path: Path, numbered_values: Sequence[tuple[int, object]]) -> list[float]:
    """The number of each row, or an error naming the first cell that is not a finite number."""
    targets = []
    for number, value in numbered_values:
        target = _number(value)
        if target is None:
            raise DataFormatError(f"{path}:{number}: the target {value!r} is not a number (--task regression)")
        targets.append(target)
    return targets


def multi_label_rows(numbered_values: Sequence[tuple[int, object]]) -> list[list[str]]:
    """The class names of each row of one file's multi-label column (the file's separator found once)."""
    separator = separator_of([value for _, value in numbered_values])
    return [multi_label_names(value, separator) for _, value in numbered_values]


__all__ = [
    "MULTI_LABEL",
    "REGRESSION",
    "SEPARATORS",
    "SINGLE_LABEL",
    "check_single_label",
    "decided",
    "decided_by_probabilities",
    "multi_label_names",
    "multi_label_rows",
    "probabilities",
    "regression_targets",
    "separator_of",
]


def decided(logits, problem_type: str | None):
    """What a head's logits say, numpy or torch alike: the arg-max class (single-label, and every token task), a 0/1
    per class where its logit is above 0 (multi-label: probability above 0.5), or the one output (regression)."""
    if problem_type == MULTI_LABEL:
        return (logits > 0) * 1
    if problem_type == REGRESSION:
        return logits[..., 0]
    return logits.argmax(-1)


def probabilities(logits, problem_type: str | None):
    """What an ensemble averages of each member (torch): class probabilities (softmax; multi-label: a sigmoid per
    class), or a regression's value itself."""
    if problem_type == MULTI_LABEL:
        return logits.sigmoid()
    if problem_type == REGRESSION:
        return logits
    return logits.softmax(-1)


def decided_by_probabilities(averaged, problem_type: str | None):
    """`decided` of averaged `probabilities`: a probability above 0.5 being a logit above 0."""
    if problem_type == MULTI_LABEL:
        return (averaged > 0.5) * 1
    return decided(averaged, problem_type)
