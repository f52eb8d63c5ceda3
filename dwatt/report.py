"""Tables and figures from results files: every number is read from a run, never typed.

`dwatt report RESULTS... --output DIR` reads results stores (`results.jsonl` of `dwatt sweep`) and single-run
`results.json` files, and writes into DIR: `report.md` (every table, each figure linked, and what could not be
drawn for lack of runs), `tables/*.csv` and `figures/*.png|svg`. Scores are means over trials (seeds) with a 95%
confidence interval from Student's t distribution; a setting with one trial has no interval.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

# The paper's numbers that our README compares against (DWAtt, COLING 2024): Figure 2 at N=128 and 100 epochs,
# RoBERTa-large, FE; Table 3, WikiText-2 test perplexity, FT.
PAPER = {
    "conll_n128_e100_dwatt_minus_base_plus_n": 5.28,
    "conll_n128_e100_dwatt_minus_concat": 1.6,
    "wikitext2_perplexity": {"base": 2.90, "dwatt": 2.91, "base_plus_n": 2.98, "concat": 3.44},
}
FUSION_NAMES = {"base": "Base", "base_plus_n": "Base+n", "concat": "Concat", "dwatt": "DWAtt", "scalar_mix": "ScalarMix"}
# Resource tiers of WikiAnn languages by the size of their training split (Rahimi et al. 2019 splits): 20k, 5-10k,
# 1k and 100 sentences, a proxy for the size of the language's Wikipedia.
TIERS = ((20_000, "high"), (5_000, "medium"), (1_000, "low"), (0, "very low"))
# A setting is what a mean is taken over trials of; runs scored on different dev subsets never pool.
SETTING = ["task", "dataset", "backbone", "mode", "fusion", "n_shot", "epochs", "num_dev_sentences", "pooling"]


def tier(train_pool_size: int) -> str:
    return next(name for floor, name in TIERS if train_pool_size >= floor)


def backbone_label(backbone: str | None) -> str:
    """A short name for a backbone: the Hub id's or folder's last part (its parent's for a folder called `model`);
    the packaged default backbone by the name of the Hub model it ships, wherever it was installed."""
    from .defaults import DEFAULT_BACKBONE_HUB_ID, DEFAULT_BACKBONE_PACKAGE

    path = Path(str(backbone))
    if backbone is None or DEFAULT_BACKBONE_PACKAGE in path.parts:
        return DEFAULT_BACKBONE_HUB_ID.split("/")[-1]
    return path.parent.name if path.name == "model" and path.parent.name else path.name


# Fields of a results.json that vary from one execution to the next (timing) and are kept out of comparisons.
TIMING_FIELDS = ("wall_seconds", "cache_seconds", "train_seconds", "train_examples_per_second", "environment")
# Settings of a run that do not change its results (where it writes, what it prints); kept out of its identity.
NOT_DEFINING = ("output_dir", "progress", "verbose", "save_model", "checkpoint_every_epoch", "resume")
# What a results store adds to a run's results.json (its row's id and spec); `_path` is where the row was read.
STORE_FIELDS = ("run_id", "spec", "_path")


def comparable(row: dict) -> dict:
    """A row without its timing fields: what two executions of the same run must agree on."""
    return {key: value for key, value in row.items() if key not in TIMING_FIELDS}


def run_identity(row: dict) -> str:
    """The run a row is the result of: its configuration, without what does not change results."""
    config = {key: value for key, value in row["config"].items() if key not in NOT_DEFINING}
    return json.dumps([config, row.get("seed")], sort_keys=True, default=str)


def without_duplicates(rows: list[dict]) -> list[dict]:
    """
    Each run once. The shards of a sweep (or a store and a run's own results.json) may hold the same run twice:
    identical results (timings aside) are kept once; different results for one run are refused, naming both
    places, since a report cannot tell which to believe.
    """
    kept: dict[str, dict] = {}
    for row in rows:
        identity = run_identity(row)
        if identity not in kept:
            kept[identity] = row
            continue
        first = kept[identity]
        mine, theirs = (
            {k: v for k, v in comparable(r).items() if k not in STORE_FIELDS and k != "config"} for r in (row, first)
        )
        if mine != theirs:
            differing = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
            name = row.get("run_id") or first.get("run_id") or Path(row["config"].get("output_dir", "?")).name
            raise ValueError(
                f"run {name} appears twice with different results ({', '.join(differing[:5])}): in {first['_path']} "
                f"and in {row['_path']}; keep one of them"
            )
    return list(kept.values())


def load_rows(paths: list[str | Path]) -> list[dict]:
    """Rows of results stores (`.jsonl`, one run per line) and `results.json` files, each with its source; a run
    held by two of them counts once (`without_duplicates`)."""
    rows = []
    for path in map(Path, paths):
        try:
            text = path.read_text()
        except OSError as error:
            raise ValueError(f"{path}: not a readable results file ({error.strerror})") from None
        lines = text.splitlines() if path.suffix == ".jsonl" else [text]
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                where = f"{path}:{number}" if path.suffix == ".jsonl" else str(path)
                raise ValueError(f"{where}: not a JSON results row ({error.msg})") from None
            if not isinstance(row, dict) or "config" not in row:
                raise ValueError(f"{path}:{number}: a results row needs a 'config' (is this a dwatt results file?)")
            rows.append(row | {"_path": str(path)})
    return without_duplicates(rows)



def runs_frame(rows: list[dict]) -> pd.DataFrame:
    """One line per run: the setting, the trial, and its scores (F1 x 100, perplexities)."""
    records = []
    for row in rows:
        config = row["config"]
        task = row.get("task", config.get("task", "ner"))
        dataset = {"ner": config.get("dataset") or "conll2003", "cls": config.get("dataset") or "ag_news"}.get(task, "wikitext2")
        records.append(
            {
                "task": task,
                "dataset": dataset,
                "language": dataset.split(":", 1)[1] if dataset.startswith("wikiann:") else None,
                "backbone": backbone_label(config["backbone"]),
                "mode": config["mode"],
                "fusion": config["fusion"],
                "n_shot": config.get("n_shot") if task in ("ner", "cls") else None,
                "epochs": config["epochs"],
                "trial": row.get("seed", config.get("seed")),
                "f1": 100 * row["best_dev_f1"] if "best_dev_f1" in row else math.nan,
                "accuracy": 100 * row["best_dev_accuracy"] if "best_dev_accuracy" in row else math.nan,
                "macro_f1": 100 * row["best_dev_macro_f1"] if "best_dev_macro_f1" in row else math.nan,
                "final_f1": 100 * row["final_dev_f1"] if "final_dev_f1" in row else math.nan,
                "best_epoch": row.get("best_epoch"),
                "dev_perplexity": row.get("best_dev_perplexity", math.nan),
                "test_perplexity": row.get("test_perplexity", math.nan),
                "train_pool_size": row.get("train_pool_size"),
                "num_dev_sentences": row.get("num_dev_sentences", row.get("num_dev_examples")),
                "wall_seconds": row.get("wall_seconds", math.nan),
                "dev_curve": row.get("dev_curve", []),
                "layer_weights": row.get("dev_layer_weights"),
                "pooling": row.get("pooling"),  # text classification only
            }
        )
    frame = pd.DataFrame.from_records(records)
    if not frame.empty:
        frame["tier"] = [tier(size) if size is not None and not pd.isna(size) else None for size in frame["train_pool_size"]]
    return frame


def conll_fe_grid(frame: pd.DataFrame) -> pd.DataFrame:
    """
    The CoNLL-03 FE grid of each backbone (Figures 2-4 and 7, the paper comparison): its FE runs on the dev set
    that most of them were scored on, so that a side experiment on a dev subset (FE vs FT) stays out of it.
    """
    runs = frame[(frame.task == "ner") & (frame.dataset == "conll2003") & (frame["mode"] == "fe")]
    if runs.empty:
        return runs
    dev = runs.num_dev_sentences.fillna(-1)
    main_dev = dev.groupby(runs.backbone).transform(lambda sizes: sizes.value_counts().index[0])
    return runs[dev == main_dev]


def headline_budget(runs: pd.DataFrame) -> int:
    """The epoch budget of an F1-against-N figure: the largest of the budgets run at the most values of N."""
    counts = runs.groupby("epochs").n_shot.nunique()
    return int(counts[counts == counts.max()].index.max())


def confidence_interval(values, level: float = 0.95) -> float:
    """Half-width of the `level` confidence interval of the mean (Student's t); NaN for fewer than 2 values."""
    from scipy import stats

    values = [v for v in values if not pd.isna(v)]
    if len(values) < 2:
        return math.nan
    return float(stats.t.ppf((1 + level) / 2, len(values) - 1) * stats.sem(values))


def summarize(frame: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    """Mean, 95% CI half-width and number of trials of `value` per group `by`."""
    grouped = frame.dropna(subset=[value]).groupby(by, dropna=False)[value]
    table = grouped.agg(mean="mean", trials="count").reset_index()
    table["ci95"] = grouped.agg(confidence_interval).to_numpy()
    return table


def ner_summary(frame: pd.DataFrame) -> pd.DataFrame:
    ner = frame[frame.task == "ner"]
    return summarize(ner, SETTING, "f1") if not ner.empty else pd.DataFrame()


def mlm_summary(frame: pd.DataFrame) -> pd.DataFrame:
    mlm = frame[frame.task == "mlm"]
    if mlm.empty:
        return pd.DataFrame()
    test, dev = summarize(mlm, SETTING, "test_perplexity"), summarize(mlm, SETTING, "dev_perplexity")
    return test.merge(dev, on=SETTING, suffixes=("_test_ppl", "_dev_ppl"))


def classification_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Text classification per setting: accuracy and macro-F1 (x 100), mean and CI over trials."""
    runs = frame[frame.task == "cls"]
    if runs.empty:
        return pd.DataFrame()
    return summarize(runs, SETTING, "accuracy").merge(summarize(runs, SETTING, "macro_f1"), on=SETTING,
                                                     suffixes=("_accuracy", "_macro_f1"))


def tier_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """WikiAnn per resource tier: the mean of per-language means, its CI over languages, and the languages."""
    wiki = frame[frame.language.notna() & (frame.task == "ner")]
    if wiki.empty:
        return pd.DataFrame()
    per_language = wiki.groupby(["backbone", "mode", "fusion", "epochs", "tier", "language"], as_index=False)["f1"].mean()
    table = summarize(per_language, ["backbone", "mode", "fusion", "epochs", "tier"], "f1").rename(columns={"trials": "languages"})
    names = per_language.groupby(["backbone", "mode", "fusion", "epochs", "tier"])["language"].agg(lambda s: " ".join(sorted(s)))
    return table.merge(names.reset_index(), on=["backbone", "mode", "fusion", "epochs", "tier"])


def epochs(count: int) -> str:
    return f"{count} epoch" + ("" if count == 1 else "s")


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


def pivot_f1(summary: pd.DataFrame, index: str, columns: str = "fusion") -> pd.DataFrame:
    """`mean ± ci` cells, one row per `index` value and one column per fusion."""
    cells = summary.assign(cell=[with_interval(m, c) for m, c in zip(summary["mean"], summary["ci95"])])
    table = cells.pivot(index=index, columns=columns, values="cell").reset_index()
    table[index] = table[index].astype(str)
    table.columns = [FUSION_NAMES.get(c, c) for c in table.columns]
    return table


def paper_comparison(frame: pd.DataFrame) -> str:
    """Our numbers next to the paper's headline numbers, for the settings that have been run."""
    lines = ["| claim | paper (RoBERTa-large) | ours | backbone, setting |", "|---|---|---|---|"]
    grid = conll_fe_grid(frame)
    for backbone, runs in (grid.groupby("backbone") if not grid.empty else []):
        # The paper's cell is the largest N at the largest budget; Figure 2's budget is shown too where it is smaller.
        n = runs.n_shot.max()
        at_n = runs[runs.n_shot == n]
        for budget in sorted({headline_budget(runs), at_n.epochs.max()}):
            by_trial = at_n[at_n.epochs == budget].pivot_table(index="trial", columns="fusion", values="f1")
            for other, key in (("base_plus_n", "conll_n128_e100_dwatt_minus_base_plus_n"), ("concat", "conll_n128_e100_dwatt_minus_concat")):
                if {"dwatt", other} <= set(by_trial.columns):
                    gains = (by_trial["dwatt"] - by_trial[other]).dropna()  # paired: a trial's fusions share a sample
                    if gains.empty:
                        continue
                    lines.append(
                        f"| CoNLL-03 FE dev F1, DWAtt − {FUSION_NAMES[other]} at the largest N | "
                        f"+{PAPER[key]:.2f} (N=128, 100 epochs) | {with_interval(gains.mean(), confidence_interval(gains), sign=True)} | "
                        f"{backbone}, N={n:g}, {epochs(budget)}, {len(gains)} trial{'s' * (len(gains) > 1)} |"
                    )
    mlm = mlm_summary(frame)
    for row in mlm.itertuples(index=False):
        paper = PAPER["wikitext2_perplexity"].get(row.fusion)
        lines.append(
            f"| WikiText-2 test perplexity, {FUSION_NAMES[row.fusion]} | {f'{paper:.2f}' if paper else '—'} | "
            f"{row.mean_test_ppl:.2f} | {row.backbone}, {row.mode.upper()}, {epochs(row.epochs)} |"
        )
    return "\n".join(lines) + "\n"


def write_report(paths: list[str | Path], output: str | Path, title: str = "Results") -> Path:
    """Tables (Markdown + CSV) and figures (PNG + SVG) for every experiment the results contain."""
    from .figures import draw_all

    output = Path(output)
    (output / "tables").mkdir(parents=True, exist_ok=True)
    rows = load_rows(paths)
    frame = runs_frame(rows)
    sources = ", ".join(sorted({str(Path(r["_path"])) for r in rows}))
    parts = [f"# {title}\n", (f"Generated by `dwatt report` from {sources} ({len(frame)} runs). F1: seqeval micro-F1 x 100 "
                               "on the dev split, best epoch of each run; mean ± 95% CI (Student's t) over trials.\n")]
    ner, mlm, tiers = ner_summary(frame), mlm_summary(frame), tier_summary(frame)
    classification = classification_summary(frame)
    for name, table in (("ner_summary", ner), ("mlm_summary", mlm), ("wikiann_tiers", tiers),
                        ("classification_summary", classification)):
        if not table.empty:
            table.to_csv(output / "tables" / f"{name}.csv", index=False)
    if not ner.empty:
        ner = ner.assign(experiment=[d.split(":")[0] for d in ner.dataset])
        for (experiment, backbone, mode), runs in ner.groupby(["experiment", "backbone", "mode"]):
            wikiann = experiment == "wikiann"
            parts.append(f"## {'WikiAnn per language' if wikiann else experiment}, {backbone}, {mode.upper()}: dev F1\n")
            runs = runs.sort_values(["dataset", "n_shot", "epochs"])
            prefix = [f"{d.split(':')[1]}, " if wikiann else "" for d in runs.dataset]
            unit = "sentences" if wikiann else "N"
            settings = [f"{p}{unit}={n:g}, {e} epochs" for p, n, e in zip(prefix, runs.n_shot, runs.epochs)]
            if runs.num_dev_sentences.nunique(dropna=False) > 1:  # say which rows were scored on which dev set
                settings = [s if pd.isna(d) else f"{s}, dev {d:g}" for s, d in zip(settings, runs.num_dev_sentences)]
            table = pivot_f1(runs.assign(setting=pd.Categorical(settings, categories=list(dict.fromkeys(settings)))), "setting")
            trials = sorted({runs.trials.min(), runs.trials.max()})
            parts.append(markdown(table) + f"\nTrials per cell: {'–'.join(map(str, trials))}.\n")
    if not tiers.empty:
        parts.append("## WikiAnn by resource tier (training-split size): dev F1\n")
        order = [name for _, name in TIERS if name in set(tiers.tier)]
        parts.append(markdown(pivot_f1(tiers.assign(tier=pd.Categorical(tiers.tier, categories=order)), "tier")))
    if not classification.empty:
        first = len(parts)
        for (dataset, backbone, mode), runs in classification.groupby(["dataset", "backbone", "mode"]):
            runs = runs.sort_values(["n_shot", "epochs"])
            settings = [f"N={n:g}, {e} epochs" for n, e in zip(runs.n_shot, runs.epochs)]
            if runs.pooling.nunique() > 1:
                settings = [f"{s}, {p} pooling" for s, p in zip(settings, runs.pooling)]
            order = list(dict.fromkeys(settings))
            for metric, label in (("accuracy", "accuracy"), ("macro_f1", "macro-F1")):
                parts.append(f"## Text classification, {dataset}, {backbone}, {mode.upper()}: {label}\n")
                table = runs.rename(columns={f"mean_{metric}": "mean", f"ci95_{metric}": "ci95"})
                table = table.assign(setting=pd.Categorical(settings, categories=order))
                trials = sorted({table[f"trials_{metric}"].min(), table[f"trials_{metric}"].max()})
                parts.append(markdown(pivot_f1(table, "setting")) + f"\nTrials per cell: {'–'.join(map(str, trials))}. "
                             "N: training examples per class.\n")
        (output / "tables" / "text_classification.md").write_text("\n".join(parts[first:]))
    if not mlm.empty:
        parts.append("## WikiText-2 masked LM: perplexity (Table 3)\n")
        table = mlm.assign(**{"test perplexity": mlm.mean_test_ppl.round(2), "dev perplexity": mlm.mean_dev_ppl.round(2)})
        parts.append(markdown(table, ["backbone", "mode", "fusion", "epochs", "test perplexity", "dev perplexity"]))
    parts.append("## Against the paper\n")
    parts.append(paper_comparison(frame))
    (output / "tables" / "paper_comparison.md").write_text(paper_comparison(frame))
    drawn, skipped = draw_all(frame, output / "figures")
    parts.append("## Figures\n")
    parts += [f"![{name}](figures/{name}.png)\n" for name in drawn]
    if skipped:
        parts.append("Not drawn (no runs of that experiment in these results): " + ", ".join(skipped) + ".\n")
    report = output / "report.md"
    report.write_text("\n".join(parts))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dwatt report", description="tables and figures from results files")
    parser.add_argument("results", nargs="+", help="results.jsonl stores of `dwatt sweep` and/or results.json files")
    parser.add_argument("--output", required=True, help="folder for report.md, tables/ and figures/")
    parser.add_argument("--title", default="Results")
    args = parser.parse_args(argv)
    print(write_report(args.results, args.output, args.title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
