"""How each word readout of a tagger fares (`dwatt readout-report`), from the stores of probes that differ only in
`--word-readout`: per backbone and readout, the probe's choice on dev in each trial (a Base head on one layer at one
learning rate, among every layer and rate it trained), that choice's test score, and its paired difference from the
first sub-token's readout (trials share their samples across readouts: seed t draws the same sentences), judged
ahead, behind, within ±`EQUIVALENCE_MARGIN` or not shown (`significance.verdict_of`).

The Holm family is the table's readout-against-first pairs (every backbone's), once for the difference tests and once
for the equivalence tests: one question asked of every pair, so that a verdict does not depend on how many other
readouts were measured beside it. Intervals are 95% over trials (t).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from specs_dwatt import WORD_READOUTS

from .methods import with_methods
from .selection import best_of
from .significance import EQUIVALENCE_MARGIN, equivalence_p_value, holm, paired_p_value, verdict_of
from .summaries import PROBE_FUSION, confidence_interval, load_rows, runs_frame
from .table_text import markdown, with_interval

REFERENCE = "first"
SETTING = ["backbone", "dataset", "n_shot", "epochs"]


def readout_choices(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per setting, readout and trial: the Base head chosen on dev among every layer and rate (`best_of`:
    ties by grid order, their test scores averaged)."""
    if frame.empty:
        return pd.DataFrame()
    runs = with_methods(frame)
    base = runs[runs.fusion == PROBE_FUSION]
    if base.empty:
        return pd.DataFrame()
    groups = base.groupby([*SETTING, "word_readout", "trial"])
    return pd.concat([best_of(group) for _, group in groups], ignore_index=True)


def readout_table(choices: pd.DataFrame) -> pd.DataFrame:
    """Per setting and readout: trials, the layers chosen, test (and dev) mean ± CI, the paired difference from the
    first sub-token's readout ± CI, its corrected p-values and verdict (the reference's own row has none)."""
    rows = []
    for setting, group in choices.groupby(SETTING) if not choices.empty else ():
        reference = group[group.word_readout == REFERENCE].set_index("trial").test_score
        for readout in [r for r in WORD_READOUTS if r in set(group.word_readout)]:
            mine = group[group.word_readout == readout].sort_values("trial")
            differences = (mine.set_index("trial").test_score - reference).dropna()
            compared = readout != REFERENCE and len(differences) > 0
            rows.append(
                dict(zip(SETTING, setting))
                | {
                    "readout": readout,
                    "trials": len(mine),
                    "layers": ", ".join(str(int(layer)) for layer in mine.layer),
                    "rates": ", ".join(f"{rate:g}" for rate in mine.learning_rate),
                    "test": mine.test_score.mean(),
                    "test_ci95": confidence_interval(mine.test_score),
                    "dev": mine.dev_score.mean(),
                    "minus_first": differences.mean() if compared else math.nan,
                    "minus_first_ci95": confidence_interval(differences) if compared else math.nan,
                    "p": paired_p_value(list(differences)) if compared else math.nan,
                    "p_equivalence": equivalence_p_value(list(differences), EQUIVALENCE_MARGIN)
                    if compared
                    else math.nan,
                }
            )
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table["p_holm"], table["p_equivalence_holm"] = holm(list(table.p)), holm(list(table.p_equivalence))
    table["verdict"] = [
        "" if readout == REFERENCE else verdict_of(d, p, q)
        for readout, d, p, q in zip(table.readout, table.minus_first, table.p_holm, table.p_equivalence_holm)
    ]
    return table


VERDICT_WORDS = {
    "beats": "ahead ▲",
    "trails": "behind ▼",
    "within": f"within ±{EQUIVALENCE_MARGIN:g} ≈",
    "level": "not shown",
    "no interval": "not shown",
}


def readout_markdown(table: pd.DataFrame) -> str:
    """The table as the results page prints it."""
    shown = pd.DataFrame(
        {
            "backbone": table.backbone,
            "N": table.n_shot.astype(int),
            "readout": table.readout,
            "trials": table.trials,
            "layers chosen": table.layers,
            "rates chosen": table.rates,
            "test F1": [with_interval(m, c) for m, c in zip(table.test, table.test_ci95)],
            "dev F1": table.dev.round(2),
            "minus first": [
                "" if math.isnan(m) else with_interval(m, c, sign=True)
                for m, c in zip(table.minus_first, table.minus_first_ci95)
            ],
            "verdict": [VERDICT_WORDS.get(v, v) for v in table.verdict],
        }
    )
    return markdown(shown)


def write_readout_report(stores: list[str | Path], output: str | Path, prefer=()) -> Path:
    """The readout table of the rows in `stores`, as `readouts.md` (with the notes that say how it was judged) and
    `readouts.csv` in `output`."""
    frame = runs_frame(load_rows(list(stores), prefer))
    table = readout_table(readout_choices(frame))
    if table.empty:
        raise ValueError(f"{', '.join(map(str, stores))}: no Base-head runs scored on test: nothing to compare")
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    table.to_csv(output / "readouts.csv", index=False)
    family = int(table.p.notna().sum())
    notes = (
        f"Each trial's choice on dev (layer and rate) among every layer's Base head at every rate its probe tried (the "
        f"probe widens past an edge), its test F1; 'minus first': the "
        f"paired difference from the first sub-token's readout, mean ± 95% CI over trials. Verdict: ahead ▲ / "
        f"behind ▼ where the paired t-test rejects a zero difference, within ±{EQUIVALENCE_MARGIN:g} ≈ where two one-sided tests put "
        f"the difference inside ±{EQUIVALENCE_MARGIN:g} F1, each Holm-corrected over the table's {family} readout-against-first "
        "pairs (p < 0.05); not shown: neither.\n"
    )
    path = output / "readouts.md"
    path.write_text(readout_markdown(table) + "\n" + notes)
    return path


__all__ = ["readout_choices", "readout_markdown", "readout_table", "write_readout_report"]
