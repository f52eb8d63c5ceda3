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
# A difference in each metric, in words; and how each is computed
METRIC_UNITS = {"F1": "F1", "accuracy": "accuracy points"}
METRIC_DEFINITIONS = {"F1": "seqeval micro-F1 x 100", "accuracy": "accuracy x 100"}
DEV_ITEMS = {task.score_name: task.items for task in TASKS.values()}  # what a dev set of each metric holds


def dev_size_words(table: pd.DataFrame) -> str:
    """The dev sets a `fair_comparison` table's choices were made on, in words."""
    metric = table.metric.iloc[0] if "metric" in table and not table.empty else "F1"
    sizes = sorted(table.dev_sentences.dropna().unique()) if "dev_sentences" in table else []
    return (
        f"a dev set of {' or '.join(f'{size:g}' for size in sizes)} {DEV_ITEMS.get(metric, 'examples')}"
        if sizes
        else "the dev split"
    )


def words(names: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def datasets_of(judged: pd.DataFrame) -> str:
    return ", ".join(DATASET_NAMES.get(name, name) for name in dict.fromkeys(judged.dataset))
