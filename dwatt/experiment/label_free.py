"""How far a layer ranked without labels (`dwatt rank-layers`) agrees with the layer a labelled dev set chooses, from
the fair grids' stores: per setting and measure, the rank correlation with the dev curve, the layer picked, its test
score against the dev-chosen layer's and the last layer's (`agreement`); how the probe's choice fares on a few-shot
dev sample instead of 1000 sentences (`label_budget`); and what restricting the probe to a measure's top-k layers
keeps and saves (`pruning`). Written by `dwatt rank-report` (`write_label_free_report`).

Each trial of a setting has its own few-shot sample, and every layer's head its learning rate chosen on dev (the
label-free measure chooses the layer only); a setting's ranking is one pass over 256 training texts, shared by its
trials. Intervals are 95% over trials (t); the layers are 1..L (the embedding output is never picked).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from scipy.stats import spearmanr

from ..layer_measures import MEASURES
from ..portable import backbone_label
from .selection import best_of, probe_layer_trials
from .summaries import confidence_interval, load_rows, runs_frame
from .table_text import DATASET_NAMES, markdown

SETTING = ["backbone", "dataset", "n_shot", "epochs"]
# A pick this close to the dev-chosen layer's test score is as good as it (the "within 1 point").
WITHIN = 1.0
TOP_K = (3, 5, 8)
# The reference row of each setting: no measure, the last layer (what a user with no labels reads by default).
LAST_LAYER = "last_layer"


def read_rankings(folders: list[str | Path]) -> dict[tuple[str, str], dict]:
    """`{(backbone, dataset): rank_layers.json's record}` of every rank_layers.json under `folders`."""
    rankings = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob("rank_layers.json")):
            record = json.loads(path.read_text())
            key = backbone_label(record["backbone"]), record["dataset"]
            if key in rankings:
                raise ValueError(f"{path}: a second ranking of {key[0]} on {key[1]}; keep one under the folders given")
            rankings[key] = record
    return rankings


def _values(record: dict, measure: str) -> dict[int, float]:
    return {int(layer): (math.nan if v is None else v) for layer, v in record["measures"][measure].items()}


def _trial_rows(curve: pd.DataFrame, chosen: pd.DataFrame, values: dict[int, float], measure: str, last: int) -> dict:
    """One trial's agreement of `measure` (or `LAST_LAYER`, the reference: no measure, the last layer) with its dev
    curve (`curve`: a row per layer, indexed by layer) and the layer dev chose there (`chosen`, `best_of`'s row)."""
    if measure == LAST_LAYER:
        pick, rho = last, math.nan
    else:
        spec = MEASURES[measure]
        layers = [layer for layer in curve.index if layer >= 1 and math.isfinite(values.get(layer, math.nan))]
        pick = spec.pick({layer: values[layer] for layer in layers})
        oriented = [spec.oriented(values[layer]) for layer in layers]
        rho = spearmanr(oriented, curve.loc[layers].dev_score).statistic if len(layers) > 2 else math.nan
    return {
        "pick": pick,
        "dev_layer": int(chosen.layer.iloc[0]),
        "rho": rho,
        "test": curve.loc[pick].test_score,
        "regret": chosen.test_score.iloc[0] - curve.loc[pick].test_score,
        "over_last": curve.loc[pick].test_score - curve.loc[last].test_score if last in curve.index else math.nan,
    }


def _interval(values: pd.Series) -> tuple[float, float]:
    values = values.dropna()
    return (values.mean(), confidence_interval(values)) if len(values) else (math.nan, math.nan)


def agreement(curves: pd.DataFrame, rankings: dict[tuple[str, str], dict]) -> pd.DataFrame:
    """Per setting with a ranking and measure: mean Spearman ρ of the measure (turned so higher reads better) with
    each trial's dev curve, the layer it picks, the layers dev chose, trials where they agree, and the pick's test
    regret against the dev-chosen layer and its gain over the last layer (mean, 95% CI over trials)."""
    records = []
    for key, setting in curves.groupby(SETTING):
        record = rankings.get((key[0], key[1]))
        if record is None:
            continue
        last = (
            int(setting.backbone_layers.max()) if setting.backbone_layers.notna().any() else int(setting.layer.max())
        )
        by_trial = [
            (trial.set_index("layer"), best_of(trial[trial.layer >= 1])) for _, trial in setting.groupby("trial")
        ]  # each trial's curve and its dev choice, once for every measure
        for measure in (*MEASURES, LAST_LAYER):
            values = _values(record, measure) if measure in MEASURES else {}
            trials = pd.DataFrame([_trial_rows(curve, chosen, values, measure, last) for curve, chosen in by_trial])
            regret, regret_ci = _interval(trials.regret)
            over_last, over_last_ci = _interval(trials.over_last)
            rho, rho_ci = _interval(trials.rho)
            test, test_ci = _interval(trials.test)
            records.append(
                dict(zip(SETTING, key))
                | {
                    "data": DATASET_NAMES.get(key[1], key[1]),
                    "measure": measure,
                    "pick": int(trials.pick.iloc[0]),
                    "dev_layers": ", ".join(str(layer) for layer in trials.dev_layer),
                    "hits": int((trials.pick == trials.dev_layer).sum()),
                    "within": int((trials.regret <= WITHIN).sum()),
                    "trials": len(trials),
                    "rho": rho,
                    "rho_ci95": rho_ci,
                    "test_score": test,
                    "test_ci95": test_ci,
                    "regret": regret,
                    "regret_ci95": regret_ci,
                    "over_last": over_last,
                    "over_last_ci95": over_last_ci,
                    "layers": last,
                }
            )
    return pd.DataFrame.from_records(records)


def label_budget(frame: pd.DataFrame) -> pd.DataFrame:
    """Per setting whose runs also chose on a few-shot dev sample: the best layer chosen there against the one
    chosen on the full dev set, in test score (mean, 95% CI over trials), and the trials within `WITHIN` points."""
    full = probe_layer_trials(frame)
    few = probe_layer_trials(frame, few_shot_dev=True)
    if few.empty or few.dev_score.isna().all():
        return pd.DataFrame()
    records = []
    for key, setting in few[few.dev_score.notna() & (few.layer >= 1)].groupby(SETTING):
        differences, sizes, full_sizes = [], [], []
        for trial, rows in setting.groupby("trial"):
            mine = full[(full[SETTING] == pd.Series(key, index=SETTING)).all(axis=1) & (full.trial == trial)]
            on_full = best_of(mine[mine.layer >= 1]).test_score.iloc[0]
            differences.append(best_of(rows).test_score.iloc[0] - on_full)
            sizes.append(rows.num_dev_sentences.iloc[0])
            full_sizes.append(mine.num_dev_sentences.iloc[0])
        differences = pd.Series(differences)
        mean, ci = _interval(differences)
        records.append(
            dict(zip(SETTING, key))
            | {
                "dev_examples": int(pd.Series(sizes).median()),
                "full_dev_examples": int(pd.Series(full_sizes).median()),
                "difference": mean,
                "difference_ci95": ci,
                "within": int((differences.abs() <= WITHIN).sum()),
                "trials": len(differences),
            }
        )
    return pd.DataFrame.from_records(records)


def pruning(curves: pd.DataFrame, rankings: dict[tuple[str, str], dict], backbone: str) -> pd.DataFrame:
    """For `backbone`'s settings, each measure and k in `TOP_K`: the probe restricted to the measure's top-k layers
    (by its declared direction) chooses on dev among them; trials where that keeps the full probe's layer, the test
    score it loses (mean, 95% CI), the share of head runs it trains and of backbone layers it runs (to the deepest)."""
    records = []
    for key, setting in curves[curves.backbone == backbone].groupby(SETTING):
        record = rankings.get((key[0], key[1]))
        if record is None:
            continue
        depth = int(setting.layer.max())
        by_trial = [(trial, best_of(trial)) for _, trial in setting[setting.layer >= 1].groupby("trial")]
        for measure, spec in MEASURES.items():
            order = spec.ranked({layer: v for layer, v in _values(record, measure).items() if layer >= 1})
            for k in TOP_K:
                kept = order[:k]
                losses, same = [], 0
                for trial, full in by_trial:
                    restricted = best_of(trial[trial.layer.isin(kept)])
                    losses.append(full.test_score.iloc[0] - restricted.test_score.iloc[0])
                    same += int(full.layer.iloc[0] == restricted.layer.iloc[0])
                loss, loss_ci = _interval(pd.Series(losses))
                records.append(
                    dict(zip(SETTING, key))
                    | {
                        "measure": measure,
                        "k": k,
                        "layers": ", ".join(map(str, sorted(kept))),
                        "same_layer": same,
                        "trials": len(losses),
                        "loss": loss,
                        "loss_ci95": loss_ci,
                        "head_runs": k / depth,
                        "backbone_layers": max(kept) / depth,
                    }
                )
    return pd.DataFrame.from_records(records)


def _pm(mean: float, ci: float) -> str:
    if math.isnan(mean):
        return ""
    mean = round(mean, 2) + 0.0  # no "-0.00"
    return f"{mean:+.2f}" + ("" if math.isnan(ci) else f" ± {ci:.2f}")


def agreement_table(table: pd.DataFrame) -> str:
    """One row per setting and measure."""
    rows = [
        [
            f"{row.backbone}, {DATASET_NAMES.get(row.dataset, row.dataset)}, N = {row.n_shot}",
            _named(row.measure),
            _pm(row.rho, row.rho_ci95),
            str(row.pick),
            row.dev_layers,
            f"{row.hits} of {row.trials}",
            f"{row.test_score:.2f} ± {row.test_ci95:.2f}"
            if not math.isnan(row.test_ci95)
            else f"{row.test_score:.2f}",
            _pm(row.regret, row.regret_ci95),
            f"{row.within} of {row.trials}",
            _pm(row.over_last, row.over_last_ci95),
        ]
        for row in table.itertuples()
    ]
    header = [
        "setting",
        "measure",
        "ρ with dev",
        "picks",
        "dev chose",
        "same layer",
        "test at pick",
        "regret",
        "within 1",
        "over last",
    ]
    return markdown(pd.DataFrame(rows, columns=header))


def measure_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per data set and measure, over its settings: mean ρ, trials where the pick is the dev-chosen layer or within
    `WITHIN` of it, the median and worst setting's regret, and the settings where the pick beats the last layer."""
    return (
        table.groupby(["data", "measure"], sort=False)
        .agg(
            settings=("regret", "size"),
            rho=("rho", "mean"),
            hits=("hits", "sum"),
            within=("within", "sum"),
            trials=("trials", "sum"),
            median_regret=("regret", "median"),
            worst_regret=("regret", "max"),
            over_last=("over_last", lambda values: int((values > 0).sum())),
        )
        .reset_index()
    )


def summary_table(summary: pd.DataFrame) -> str:
    rows = [
        [
            row.data,
            _named(row.measure),
            str(row.settings),
            "" if math.isnan(row.rho) else f"{row.rho:+.2f}",
            f"{row.hits} of {row.trials}",
            f"{row.within} of {row.trials}",
            f"{row.median_regret:.2f}",
            f"{row.worst_regret:.2f}",
            f"{row.over_last} of {row.settings}",
        ]
        for row in summary.itertuples()
    ]
    header = [
        "data",
        "measure",
        "settings",
        "mean ρ",
        "same layer",
        "within 1",
        "median regret",
        "worst",
        "mean above last",
    ]
    return markdown(pd.DataFrame(rows, columns=header))


def advice(summary: pd.DataFrame) -> str:
    """One sentence per data set that the summary supports: the measure closest to the dev-chosen layer, whether
    any lands within `WITHIN` points of it in most trials (with its worst setting), and how the closest compares
    with reading the last layer."""
    sentences = []
    for data, rows in summary.groupby("data", sort=False):
        last = rows[rows.measure == LAST_LAYER]
        rows = rows[rows.measure != LAST_LAYER]
        best = rows.sort_values(["median_regret", "measure"]).iloc[0]
        most = rows[rows.within * 2 > rows.trials]
        settings = f"{best.settings} setting{'s' if best.settings != 1 else ''}"
        text = (
            f"On {data}, the closest measure is {_named(best.measure)} (median regret {best.median_regret:.2f} "
            f"over {settings}; the dev-chosen layer itself in {best.hits} of {best.trials} trials)"
        )
        if most.empty:
            text += (
                f", and no measure's pick lands within {WITHIN:g} point of the dev-chosen layer in most trials: "
                "none of them predicts the best layer"
            )
        else:
            shortlist = ", ".join(f"{_named(row.measure)} (worst {row.worst_regret:.2f})" for row in most.itertuples())
            text += f"; within {WITHIN:g} point of the dev-chosen layer in most trials: {shortlist}"
        if not last.empty:
            reference = last.iloc[0]
            text += (
                f". The last layer, with no measure, is within {WITHIN:g} point in {reference.within} of "
                f"{reference.trials} trials (median regret {reference.median_regret:.2f}, worst "
                f"{reference.worst_regret:.2f})"
            )
        sentences.append(text + ". A label-free pick is a shortlist to probe, not a choice.")
    return " ".join(sentences)


def _named(measure: str) -> str:
    return "the last layer" if measure == LAST_LAYER else measure.replace("_", " ")


def budget_table(table: pd.DataFrame) -> str:
    rows = [
        [
            f"{row.backbone}, {DATASET_NAMES.get(row.dataset, row.dataset)}, N = {row.n_shot}",
            str(row.dev_examples),
            str(row.full_dev_examples),
            _pm(row.difference, row.difference_ci95),
            f"{row.within} of {row.trials}",
        ]
        for row in table.itertuples()
    ]
    header = ["setting", "few-shot dev examples", "full dev examples", "test vs the full dev's choice", "within 1"]
    return markdown(pd.DataFrame(rows, columns=header))


def pruning_table(table: pd.DataFrame) -> str:
    rows = [
        [
            f"{row.backbone}, {DATASET_NAMES.get(row.dataset, row.dataset)}, N = {row.n_shot}",
            _named(row.measure),
            str(row.k),
            row.layers,
            f"{row.same_layer} of {row.trials}",
            _pm(-row.loss, row.loss_ci95),
            f"{row.head_runs:.0%}",
            f"{row.backbone_layers:.0%}",
        ]
        for row in table.itertuples()
    ]
    header = ["setting", "measure", "k", "top-k layers", "same choice", "test vs full probe", "head runs", "backbone"]
    return markdown(pd.DataFrame(rows, columns=header))


def passes_table(rankings: dict[tuple[str, str], dict]) -> str:
    """One row per ranking: its pass (texts, tokens, seconds, peak memory) and each measure's pick."""
    rows = [
        [
            f"{backbone}, {DATASET_NAMES.get(dataset, dataset)}",
            f"{record['texts']} ({record['tokens']} tokens)",
            f"{record['seconds']:.0f}",
            "" if record.get("peak_memory_bytes") is None else f"{record['peak_memory_bytes'] / 2**30:.2f}",
            *(str(record["picks"][measure]) for measure in MEASURES),
        ]
        for (backbone, dataset), record in sorted(rankings.items())
    ]
    header = ["backbone, data", "texts", "seconds", "peak GiB", *(f"{_named(m)} picks" for m in MEASURES)]
    return markdown(pd.DataFrame(rows, columns=header))


def write_label_free_report(
    stores: list[str | Path],
    rankings: list[str | Path],
    output: str | Path,
    prefer: list[str | Path] = (),
    prune: str | None = None,
    budget_stores: list[str | Path] | None = None,
) -> Path:
    """The agreement, summary, advice, label-budget and (for backbone `prune`) pruning tables as Markdown and CSV in
    `output`; returns the Markdown file's path. `budget_stores`: the stores the label budget reads (default:
    `stores`), where the few-shot dev choices are held apart from the stores of the agreement."""
    frame = runs_frame(load_rows(list(stores), prefer))
    curves = probe_layer_trials(frame)
    found = read_rankings(list(rankings))
    table = agreement(curves, found)
    if table.empty:
        raise ValueError("no setting of the stores has a ranking (rank_layers.json) of its backbone and dataset")
    summary = measure_summary(table)
    budget = label_budget(runs_frame(load_rows(list(budget_stores))) if budget_stores else frame)
    output = Path(output)
    (output / "tables").mkdir(parents=True, exist_ok=True)
    table.to_csv(output / "tables" / "agreement.csv", index=False)
    sections = {
        "passes": passes_table(found),
        "agreement": agreement_table(table),
        "summary": summary_table(summary),
        "advice": advice(summary) + "\n",
    }
    if not budget.empty:
        budget.to_csv(output / "tables" / "label_budget.csv", index=False)
        sections["label_budget"] = budget_table(budget)
    if prune is not None:
        pruned = pruning(curves, found, prune)
        pruned.to_csv(output / "tables" / "pruning.csv", index=False)
        sections["pruning"] = pruning_table(pruned)
    for name, text in sections.items():
        (output / "tables" / f"{name}.md").write_text(text)
    path = output / "label_free.md"
    path.write_text("\n".join(f"## {name.replace('_', ' ')}\n\n{text}" for name, text in sections.items()))
    return path


__all__ = [
    "agreement",
    "label_budget",
    "measure_summary",
    "pruning",
    "read_rankings",
    "write_label_free_report",
]
