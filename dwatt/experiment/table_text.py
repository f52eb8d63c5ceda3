"""Numbers and names as the report prints them: counts in words, means with their intervals, pipe tables, the
datasets' and metrics' names."""

from __future__ import annotations

import pandas as pd

from ..tasks import TASKS


def epochs(count: int) -> str:
    return f"{count} epoch" + ("" if count == 1 else "s")


def trials_text(count: float) -> str:
    return f"{count:.0f} trial" + ("" if count == 1 else "s")


def with_interval(mean: float, ci: float, digits: int = 2, sign: bool = False) -> str:
    value = f"{mean:{'+' if sign else ''}.{digits}f}"
    return value if pd.isna(ci) else f"{value} ± {ci:.{digits}f}"


def markdown(table: pd.DataFrame, columns: list[str] | None = None) -> str:
    """A pipe table without depending on `tabulate`."""
    table = table[columns] if columns else table
    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


DATASET_NAMES = {"conll2003": "CoNLL-03", "ag_news": "AG News"}


def scored_by(metric: str):
    """The task whose tables call its score `metric` (`Task.score_name`), or None."""
    return next((task for task in TASKS.values() if task.score_name == metric), None)


def metric_unit(metric: str, default: str = "") -> str:
    """A difference in `metric`, in words, from its task's record (`default` for a metric no task scores by)."""
    task = scored_by(metric)
    return task.score_unit if task else default


def dev_items(metric: str) -> str:
    """What a dev set of `metric`'s task holds, in words (`Task.items`)."""
    task = scored_by(metric)
    return task.items if task else "examples"


def metric_definition(metric: str) -> str:
    """How `metric` is computed, from its task's record."""
    task = scored_by(metric)
    return task.score_definition if task else metric


def dev_size_words(table: pd.DataFrame) -> str:
    """The dev sets a `fair_comparison` table's choices were made on, in words."""
    metric = table.metric.iloc[0] if "metric" in table and not table.empty else "F1"
    sizes = sorted(table.dev_sentences.dropna().unique()) if "dev_sentences" in table else []
    return (
        f"a dev set of {' or '.join(f'{size:g}' for size in sizes)} {dev_items(metric)}" if sizes else "the dev split"
    )


def words(names: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def datasets_of(judged: pd.DataFrame) -> str:
    return ", ".join(DATASET_NAMES.get(name, name) for name in dict.fromkeys(judged.dataset))
