"""Tables and figures from results files: every number is read from a run, never typed.

`dwatt report RESULTS... --output DIR` reads results stores (`results.jsonl` of `dwatt sweep`) and single-run
`results.json` files, and writes into DIR: `report.md` (every table, each figure linked, and what could not be
drawn for lack of runs), `tables/*.csv` and `figures/*.png|svg`. Scores are means over trials (seeds) with a 95%
confidence interval from Student's t distribution; a setting with one trial has no interval.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..atomic import scratch_folder
from ..tasks import TASKS
from .figures import FIGURES, draw_all, figure_probe, save
from .selection import (
    BEST_LAYER,
    ENSEMBLE_METHODS,
    FUSION_METHODS,
    LAST_LAYER,
    METHODS,
    NO_INTERVAL,
    coverage,
    fair_comparison,
    is_fair_grid,
    no_dev_comparison,
    pooled_comparison,
    probe_curve,
    verdicts,
)
from .summaries import (  # noqa: F401  (re-exported: the report's API reads runs through them)
    DEPTH_DEV_SENTENCES,
    DEPTH_EPOCHS,
    FUSION_NAMES,
    MODE_NAMES,
    NOT_DEFINING,
    PREFERRED_OVER,
    SETTING,
    STORE_FIELDS,
    TIERS,
    TIMING_FIELDS,
    backbone_label,
    backbone_layers,
    classification_summary,
    comparable,
    confidence_interval,
    conll_fe_grid,
    depth_grid,
    headline_budget,
    load_rows,
    mlm_summary,
    ner_summary,
    paired_gain,
    run_identity,
    runs_frame,
    summarize,
    tier,
    tier_summary,
    without_duplicates,
)

# The paper's numbers that our README compares against (DWAtt, COLING 2024): Figure 2 at N=128 and 100 epochs,
# RoBERTa-large, FE; Table 3, WikiText-2 test perplexity, FT.
PAPER = {
    "conll_n128_e100_dwatt_minus_base_plus_n": 5.28,
    "conll_n128_e100_dwatt_minus_concat": 1.6,
    "wikitext2_perplexity": {"base": 2.90, "dwatt": 2.91, "base_plus_n": 2.98, "concat": 3.44},
}


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
    for backbone, runs in grid.groupby("backbone") if not grid.empty else []:
        # The paper's cell is the largest N at the largest budget; Figure 2's budget is shown too where it is smaller.
        n = runs.n_shot.max()
        at_n = runs[runs.n_shot == n]
        for budget in sorted({headline_budget(runs), at_n.epochs.max()}):
            by_trial = at_n[at_n.epochs == budget].pivot_table(index="trial", columns="fusion", values="f1")
            for other, key in (
                ("base_plus_n", "conll_n128_e100_dwatt_minus_base_plus_n"),
                ("concat", "conll_n128_e100_dwatt_minus_concat"),
            ):
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
            f"{row.mean_test_ppl:.2f} | {row.backbone}, {MODE_NAMES.get(row.mode, row.mode)}, {epochs(row.epochs)} |"
        )
    return "\n".join(lines) + "\n"


def fusion_gains(frame: pd.DataFrame) -> str:
    """How much layer fusion adds over the last layer, per backbone (deepest first): CoNLL-03 dev F1 of the depth
    grid and AG News accuracy at its grid's pooling, each fusion's mean, and DWAtt's paired gain over Base and over
    Concat. Bold titles, so that the README can hold it inside a section of its own."""
    grid = depth_grid(frame)
    news = frame[(frame.dataset == "ag_news") & (frame["mode"] == "fe")]
    depths = backbone_layers(frame)
    backbones = sorted(set(grid.backbone), key=lambda b: (-depths.get(b, 0), b))
    fusions = [f for f in FUSION_NAMES if f in set(grid.fusion) | set(news.fusion)]
    header = ["backbone (layers)", "task, N", *(FUSION_NAMES[f] for f in fusions), "DWAtt − Base", "DWAtt − Concat"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for backbone in backbones:
        blocks = [("CoNLL-03 F1", grid[grid.backbone == backbone], "f1")]
        own_news = news[news.backbone == backbone]
        if not own_news.empty:  # the grid's own pooling (the one most of its runs used), at its budget
            own_news = own_news[own_news.pooling == own_news.pooling.value_counts().index[0]]
            own_news = own_news[own_news.epochs == own_news.epochs.max()]
            blocks.append((f"AG News acc. ({own_news.pooling.iloc[0]})", own_news, "accuracy"))
        for label, runs, value in blocks:
            for n in sorted(runs.n_shot.unique()):
                at_n = runs[runs.n_shot == n]
                means = at_n.groupby("fusion")[value].mean()
                cells = [f"{means[f]:.2f}" if f in means else "" for f in fusions]
                gains = [
                    with_interval(*paired_gain(at_n, value, "dwatt", other)[:2], sign=True)
                    if paired_gain(at_n, value, "dwatt", other)[2]
                    else ""
                    for other in ("base", "concat")
                ]
                trials = int(at_n.groupby("fusion").size().max())
                lines.append(
                    f"| {backbone} ({depths.get(backbone, '?')}) | {label}, N={n:g} ({trials} trial{'s' * (trials > 1)}) | "
                    + " | ".join(cells + gains)
                    + " |"
                )
    return "\n".join(lines) + "\n"


def mode_comparison(frame: pd.DataFrame) -> str:
    """FE, LoRA and FT side by side: CoNLL-03 dev F1 of each fusion and N wherever one setting (backbone, budget, dev
    set) was trained in more than one mode, over the trials (samples) that every mode of the row has, mean ± 95% CI
    with their number. While LoRA runs are incomplete, only the cells LoRA has reached. Bold titles, as for the
    README."""
    runs = frame[frame.dataset == "conll2003"]
    runs = runs.assign(dev=runs.num_dev_sentences.fillna(-1))
    parts = []
    for (backbone, epochs_, dev), setting in runs.groupby(["backbone", "epochs", "dev"]):
        modes = [m for m in MODE_NAMES if m in set(setting["mode"])]
        if len(modes) < 2:
            continue
        dev_note = f", dev {dev:g} sentences" if dev > 0 else ""
        lines = [
            f"**CoNLL-03 dev F1 by training mode, {backbone}, {epochs(epochs_)}{dev_note}**\n",
            "| N | fusion | " + " | ".join(MODE_NAMES[m] for m in modes) + " |",
            "|---|---|" + "---|" * len(modes),
        ]
        for (n, fusion), cell in setting.groupby(["n_shot", "fusion"]):
            present = set(cell["mode"])
            if "lora" in modes and "lora" not in present:
                continue  # the rows LoRA has reached; the others are in the per-mode tables
            shared = set.intersection(*(set(cell[cell["mode"] == m].trial) for m in present))
            cell = cell[cell.trial.isin(shared)]  # the same samples in every mode: paired by trial
            if cell.empty:
                continue
            values = [cell[cell["mode"] == m].f1 for m in modes]
            cells = [f"{with_interval(v.mean(), confidence_interval(v))} ({len(v)})" if len(v) else "" for v in values]
            lines.append(f"| {n:g} | {FUSION_NAMES.get(fusion, fusion)} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines) + "\n\nIn brackets: trials, the same samples in every mode of a row.\n")
    return "\n".join(parts)


def write_report(
    paths: list[str | Path], output: str | Path, title: str = "Results", prefer: Sequence[str | Path] = ()
) -> Path:
    """Tables (Markdown + CSV) and figures (PNG + SVG) for every experiment the results contain, written into a
    scratch folder beside `output` and moved into place only when all of them are written: a report that fails
    (unreadable results, no runs, a figure that cannot be drawn) leaves the earlier report as it was. `prefer`:
    stores whose row of a run is taken where another store holds that run with other results (`load_rows`)."""
    output = Path(output)
    rows = load_rows(paths, prefer)
    if not rows:
        raise ValueError(f"{', '.join(map(str, paths))}: no runs to report")
    frame = runs_frame(rows)
    sources = ", ".join(sorted({str(Path(r["_path"])) for r in rows}))
    preferred = [row for row in rows if PREFERRED_OVER in row]
    if preferred:
        sources += (
            f"; of {len(preferred)} runs also held with other results (float noise of a run trained again) "
            f"by {', '.join(sorted({str(Path(row[PREFERRED_OVER])) for row in preferred}))}, the rows of "
            f"{', '.join(sorted({str(Path(row['_path'])) for row in preferred}))} (`--prefer`)"
        )
    with scratch_folder(output) as staging:
        (staging / "tables").mkdir()
        if is_fair_grid(frame):
            write_fair_report(frame, staging, title, sources)
        else:
            write_full_report(frame[frame.ensemble_size.isna()], staging, title, sources)
        publish(staging, output)
    return output / "report.md"


def publish(staging: Path, output: Path) -> None:
    """A report written in `staging` moved into `output`, file by file: tables and figures of earlier results that
    the new report does not have are removed (they would linger beside the new ones), anything else in `output`
    stays."""
    known_figures = set(FIGURES) | {"probe"}
    stale = {
        "tables": lambda path: path.suffix in (".md", ".csv"),
        "figures": lambda path: path.suffix in (".png", ".svg") and path.stem in known_figures,
    }
    for part, is_stale in stale.items():
        target, new = output / part, staging / part
        names = {path.name for path in new.iterdir()} if new.is_dir() else set()
        target.mkdir(parents=True, exist_ok=True)
        for path in target.iterdir():
            if path.is_file() and is_stale(path) and path.name not in names:
                path.unlink()
        for name in sorted(names):
            os.replace(new / name, target / name)
    os.replace(staging / "report.md", output / "report.md")


def write_full_report(frame: pd.DataFrame, output: Path, title: str, sources: str) -> Path:
    """The report of any results but a fair-comparison grid's, into `output`."""
    parts = [
        f"# {title}\n",
        (
            f"Generated by `dwatt report` from {sources} ({len(frame)} runs). F1: seqeval micro-F1 x 100 "
            "on the dev split, best epoch of each run; mean ± 95% CI (Student's t) over trials.\n"
        ),
    ]
    ner, mlm, tiers = ner_summary(frame), mlm_summary(frame), tier_summary(frame)
    classification = classification_summary(frame)
    for name, table in (
        ("ner_summary", ner),
        ("mlm_summary", mlm),
        ("wikiann_tiers", tiers),
        ("classification_summary", classification),
    ):
        if not table.empty:
            table.to_csv(output / "tables" / f"{name}.csv", index=False)
    if not ner.empty:
        ner = ner.assign(experiment=[d.split(":")[0] for d in ner.dataset])
        for (experiment, backbone, mode), runs in ner.groupby(["experiment", "backbone", "mode"]):
            wikiann = experiment == "wikiann"
            parts.append(
                f"## {'WikiAnn per language' if wikiann else experiment}, {backbone}, {MODE_NAMES.get(mode, mode)}: dev F1\n"
            )
            runs = runs.sort_values(["dataset", "n_shot", "epochs"])
            prefix = [f"{d.split(':')[1]}, " if wikiann else "" for d in runs.dataset]
            unit = "sentences" if wikiann else "N"
            settings = [f"{p}{unit}={n:g}, {e} epochs" for p, n, e in zip(prefix, runs.n_shot, runs.epochs)]
            if runs.num_dev_sentences.nunique(dropna=False) > 1:  # say which rows were scored on which dev set
                settings = [s if pd.isna(d) else f"{s}, dev {d:g}" for s, d in zip(settings, runs.num_dev_sentences)]
            table = pivot_f1(
                runs.assign(setting=pd.Categorical(settings, categories=list(dict.fromkeys(settings)))), "setting"
            )
            trials = sorted({runs.trials.min(), runs.trials.max()})
            parts.append(markdown(table) + f"\nTrials per cell: {'–'.join(map(str, trials))}.\n")
    if not tiers.empty:
        parts.append("## WikiAnn by resource tier (training-split size): dev F1\n")
        order = [name for _, name in TIERS if name in set(tiers.tier)]
        parts.append(markdown(pivot_f1(tiers.assign(tier=pd.Categorical(tiers.tier, categories=order)), "tier")))
    if not classification.empty:
        embedded = []  # the same tables for the README, under bold titles: they sit inside a section of their own
        for (dataset, backbone, mode), runs in classification.groupby(["dataset", "backbone", "mode"]):
            runs = runs.sort_values(["n_shot", "epochs"])
            settings = [f"N={n:g}, {e} epochs" for n, e in zip(runs.n_shot, runs.epochs)]
            if runs.pooling.nunique() > 1:
                settings = [f"{s}, {p} pooling" for s, p in zip(settings, runs.pooling)]
            order = list(dict.fromkeys(settings))
            for metric, label in (("accuracy", "accuracy"), ("macro_f1", "macro-F1")):
                title = f"Text classification, {dataset}, {backbone}, {MODE_NAMES.get(mode, mode)}: {label}"
                table = runs.rename(columns={f"mean_{metric}": "mean", f"ci95_{metric}": "ci95"})
                table = table.assign(setting=pd.Categorical(settings, categories=order))
                trials = sorted({table[f"trials_{metric}"].min(), table[f"trials_{metric}"].max()})
                body = (
                    markdown(pivot_f1(table, "setting")) + f"\nTrials per cell: {'–'.join(map(str, trials))}. "
                    "N: training examples per class.\n"
                )
                parts += [f"## {title}\n", body]
                embedded += [f"**{title}**\n", body]
        (output / "tables" / "text_classification.md").write_text("\n".join(embedded))
    if not mlm.empty:
        parts.append("## WikiText-2 masked LM: perplexity (Table 3)\n")
        table = mlm.assign(
            **{"test perplexity": mlm.mean_test_ppl.round(2), "dev perplexity": mlm.mean_dev_ppl.round(2)}
        )
        parts.append(markdown(table, ["backbone", "mode", "fusion", "epochs", "test perplexity", "dev perplexity"]))
    if not depth_grid(frame).empty:
        gains = fusion_gains(frame)
        parts.append(
            f"## Layer fusion against the last layer, by depth (CoNLL-03 FE, {DEPTH_DEV_SENTENCES} fixed dev "
            f"sentences, {DEPTH_EPOCHS} epochs; AG News FE at its grid's pooling)\n"
        )
        parts.append(gains + "\nMeans over trials; the gains are paired by trial (mean ± 95% CI).\n")
        (output / "tables" / "fusion_gains.md").write_text(gains)
    modes = mode_comparison(frame)
    if modes:
        parts += ["## Training modes side by side\n", modes]
        (output / "tables" / "training_modes.md").write_text(modes)
    parts.append("## Against the paper\n")
    comparison = paper_comparison(frame)
    parts.append(comparison)
    (output / "tables" / "paper_comparison.md").write_text(comparison)
    drawn, skipped = draw_all(frame, output / "figures")
    parts.append("## Figures\n")
    parts += [f"![{name}](figures/{name}.png)\n" for name in drawn]
    if skipped:
        parts.append("Not drawn (no runs of that experiment in these results): " + ", ".join(skipped) + ".\n")
    report = output / "report.md"
    report.write_text("\n".join(parts))
    return report


def fair_table(table: pd.DataFrame) -> str:
    """One table per backbone: each method's test score at its dev-chosen learning rate (and layer)."""
    parts = []
    for (backbone, dataset, epochs), rows in table.groupby(["backbone", "dataset", "epochs"], sort=False):
        metric = rows.metric.iloc[0]
        lines = pd.DataFrame(
            {
                "N": [f"{n:g}" for n in rows.n_shot],
                "method": rows.method,
                f"test {metric}": [with_interval(m, c) for m, c in zip(rows.test_score, rows.test_ci95)],
                "− best single layer": [
                    with_interval(m, c, sign=True) if not pd.isna(m) else ""
                    for m, c in zip(rows.minus_best_layer, rows.minus_best_layer_ci95)
                ],
                "learning rate (per trial)": rows.learning_rates,
                "layer (per trial)": rows.layers,
                "trials": rows.trials,
            }
        )
        grids = rows.learning_rates_tried.unique()
        if len(grids) == 1:  # one grid for every method and N: said once, under the title
            tried = f"Learning rates tried: {grids[0]}.\n\n"
        else:
            tried, lines["learning rates tried"] = "", rows.learning_rates_tried.to_numpy()
        parts.append(
            f"**{backbone}, {dataset}, FE, {epochs} epochs: test {metric} of the run chosen on dev**\n\n"
            + tried
            + markdown(lines)
        )
    return "\n".join(parts)


def verdict_lines(table: pd.DataFrame) -> str:
    """One line per backbone and N of a `fair_comparison` table: which fusions beat the best single layer, which are
    level with it, which trail it (the test score, paired by trial, 95% CI), and where the last layer stands."""
    lines = []
    for (backbone, dataset, n_shot, _epochs), rows in table.groupby(
        ["backbone", "dataset", "n_shot", "epochs"], sort=False
    ):
        best, mine = rows[rows.method == BEST_LAYER], verdicts(rows)
        if best.empty or mine.empty:
            continue

        def listed(kind: str, mine: pd.DataFrame = mine) -> str:
            chosen = mine[(mine.verdict == kind) & (mine.method != LAST_LAYER)]
            return (
                ", ".join(
                    f"{m} {with_interval(d, c, sign=True)}"
                    for m, d, c in zip(chosen.method, chosen.minus_best_layer, chosen.minus_best_layer_ci95)
                )
                or "none"
            )

        last = mine[mine.method == LAST_LAYER]
        trials = int(best.trials.iloc[0])
        parts = [
            f"- **{backbone}**, {dataset}, N = {n_shot:g} ({trials} trial{'s' * (trials != 1)}): the best single "
            f"layer {best.test_score.iloc[0]:.2f} (layer {best.layers.iloc[0]}). {kinds(mine, plural=True).capitalize()} that beat it "
            f"(Holm-corrected p < 0.05): {listed('beats')}; level with it (no difference shown): {listed('level')}; "
            f"that trail it: {listed('trails')}"
        ]
        if ((mine.verdict == NO_INTERVAL) & (mine.method != LAST_LAYER)).any():
            parts.append(
                f"; no interval yet (one trial, or the same difference in every trial): {listed(NO_INTERVAL)}"
            )
        if not last.empty and last.verdict.iloc[0] == NO_INTERVAL:  # a ± 0.00 would claim a certainty it lacks
            why = "one trial" if trials == 1 else "the same difference in every trial: no interval"
            parts.append(f". The last layer: {last.minus_best_layer.iloc[0]:+.2f} ({why})")
        elif not last.empty:
            parts.append(
                f". The last layer: {with_interval(last.minus_best_layer.iloc[0], last.minus_best_layer_ci95.iloc[0], sign=True)}"
            )
        edge = rows[rows.at_largest_rate.astype(bool)].method.tolist()
        if edge:
            parts.append(
                f". Chosen at the largest learning rate tried in every trial (a larger one might score higher): "
                f"{', '.join(edge)}"
            )
        lines.append("".join(parts) + ".")
    return "\n".join(lines) + "\n" if lines else ""


DATASET_NAMES = {"conll2003": "CoNLL-03", "ag_news": "AG News"}
# A difference in each metric, in words; and how each is computed
METRIC_UNITS = {"F1": "F1", "accuracy": "accuracy points"}
METRIC_DEFINITIONS = {"F1": "seqeval micro-F1 x 100", "accuracy": "accuracy x 100"}
DEV_ITEMS = {task.score_name: task.items for task in TASKS.values()}  # what a dev set of each metric holds


def coverage_table(covered: pd.DataFrame) -> str:
    """The coverage of a fair grid (`selection.coverage`) as a pipe table, one row per backbone, dataset and N, one
    column per method: complete trials of planned, and runs held of planned where a trial is incomplete."""
    if covered.empty:
        return ""
    cells = covered.assign(
        cell=[
            f"{row.complete_trials}/{row.trials}"
            + ("" if row.runs == row.planned_runs else f" ({row.runs}/{row.planned_runs} runs)")
            for row in covered.itertuples()
        ]
    )
    table = cells.pivot_table(
        index=["backbone", "dataset", "n_shot"], columns="method", values="cell", aggfunc="first", sort=False
    ).reset_index()
    table.columns.name = None
    table = table.rename(columns={"n_shot": "N"}).assign(N=lambda t: t.N.map(lambda n: f"{n:g}"))
    return (
        "Trials complete (every learning rate tried, every layer for the probe) of the trials the grid has; runs "
        "held of planned where short; blank where the grid plans none (a window around the best layer that would "
        "be every layer).\n\n" + markdown(table)
    )


def dev_size_words(table: pd.DataFrame) -> str:
    """The dev sets a `fair_comparison` table's choices were made on, in words."""
    metric = table.metric.iloc[0] if "metric" in table and not table.empty else "F1"
    sizes = sorted(table.dev_sentences.dropna().unique()) if "dev_sentences" in table else []
    return (
        f"a dev set of {' or '.join(f'{size:g}' for size in sizes)} {DEV_ITEMS.get(metric, 'examples')}"
        if sizes
        else "the dev split"
    )


def regret_table(table: pd.DataFrame) -> str:
    """Selection regret of a `fair_comparison` table as a pipe table, one row per backbone, dataset and N, one
    column per method: the test score of the run chosen on dev minus the best test score among the runs the method
    chose from, mean ± 95% CI over trials (0 where dev chose what test would have)."""
    if table.empty:
        return ""
    # rounded first: a regret of -1e-15 (float noise in a difference of equal scores) is 0, not "-0.00"
    cells = table.assign(
        cell=[
            with_interval(round(r, 9) + 0.0, c, sign=True) if not pd.isna(r) else "—"
            for r, c in zip(table.regret, table.regret_ci95)
        ]
    )
    pivot = cells.pivot_table(
        index=["backbone", "dataset", "n_shot"], columns="method", values="cell", aggfunc="first", sort=False
    ).reset_index()
    pivot.columns.name = None
    pivot = pivot[["backbone", "dataset", "n_shot", *[m for m in METHODS if m in pivot]]]
    return markdown(pivot.rename(columns={"n_shot": "N"}).assign(N=lambda t: t.N.map(lambda n: f"{n:g}")))


# The methods the answer's table shows, in its order (the window fusions and ScalarMix+LD are in the full tables).
ANSWER_METHODS = (
    LAST_LAYER,
    *ENSEMBLE_METHODS.values(),
    FUSION_METHODS["scalar_mix"],
    FUSION_METHODS["concat"],
    FUSION_METHODS["base_plus_n"],
    FUSION_METHODS["dwatt"],
)
SHORT_NAMES = {
    LAST_LAYER: "last layer",
    **{name: name.removesuffix(" layers averaged") for name in ENSEMBLE_METHODS.values()},
}
MARKS = {"beats": " ▲", "trails": " ▼"}


def fair_answer(table: pd.DataFrame, pooled: pd.DataFrame | None = None) -> str:
    """The fair comparison's answer as one small table: a row per setting (backbone, N), the best single layer's test
    score, and each method's paired difference from it (mean ± 95% CI), marked ▲/▼ where the Holm-corrected test finds
    it ahead/behind (`selection.with_corrected_verdicts`), ‡ where that verdict depends on how ties on dev are broken;
    a last row with each method's trials ahead across every setting (`selection.pooled_comparison`); and what the
    marks mean. Empty where no difference has an interval yet."""
    judged = verdicts(table)
    if judged.empty or (judged.verdict == NO_INTERVAL).all():
        return ""
    methods = [method for method in ANSWER_METHODS if method in set(judged.method)]
    metric = judged.metric.iloc[0]
    header = ["setting", "best single layer", *[SHORT_NAMES.get(method, method) for method in methods]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (backbone, dataset, n_shot, _epochs), rows in table.groupby(
        ["backbone", "dataset", "n_shot", "epochs"], sort=False
    ):
        best = rows[rows.method == BEST_LAYER]
        mine = judged[
            (judged.backbone == backbone)
            & (judged.dataset == dataset)
            & (judged.n_shot == n_shot)
            & (judged.epochs == epochs)
        ].set_index("method")
        if best.empty:
            continue
        cells = []
        for method in methods:
            if method not in mine.index:
                cells.append("")
                continue
            row = mine.loc[method]
            text = (
                f"{row.minus_best_layer:+.2f}"
                if row.verdict == NO_INTERVAL
                else with_interval(row.minus_best_layer, row.minus_best_layer_ci95, sign=True)
            )
            fewer = (
                f" ({trials_text(row.trials)})" if row.trials != best.trials.iloc[0] else ""
            )  # paired on those only
            cells.append(text + MARKS.get(row.verdict, "") + ("" if row.get("tie_robust", True) else " ‡") + fewer)
        lines.append(
            f"| {backbone}, N = {n_shot:g} ({trials_text(best.trials.iloc[0])}) | {best.test_score.iloc[0]:.2f} | "
            + " | ".join(cells)
            + " |"
        )
    if pooled is not None and not pooled.empty:
        across = pooled.set_index("method")
        cells = [
            f"{across.loc[m].ahead:.0f} of {across.loc[m].ahead + across.loc[m].behind:.0f} ahead{MARKS.get(across.loc[m].verdict, '')}"
            if m in across.index
            else ""
            for m in methods
        ]
        lines.append("| every setting: trials ahead (sign test) |  | " + " | ".join(cells) + " |")
    family = judged[(judged.method != LAST_LAYER) & (judged.verdict != NO_INTERVAL)]
    unit = METRIC_UNITS.get(metric, metric)
    legend = (
        f"{datasets_of(judged)} test {metric}: the best single layer's, and each method's difference from it in "
        f"{unit} (mean ± 95% CI over trials, paired), each method at its own learning rate chosen on "
        f"{dev_size_words(table)}. ▲/▼: ahead/behind after Holm's correction (p < 0.05) over the {len(family)} "
        "method-setting pairs of the fusions and ensembles (every method of the full tables), the last layer's "
        "settings corrected apart; unmarked: no difference shown."
    )
    if pooled is not None and not pooled.empty:
        legend += (
            " Last row: trials ahead of the best single layer over every setting, a two-sided sign test, "
            "Holm-corrected across methods."
        )
    if "tie_robust" in judged and not judged.tie_robust.all():
        legend += " ‡: the verdict changes with how ties on dev are broken (the tie rule averages the tied runs)."
    return "\n".join(lines) + "\n\n" + legend + "\n"


FUSIONS_OF_ALL_LAYERS = tuple(FUSION_METHODS[name] for name in ("scalar_mix", "concat", "base_plus_n", "dwatt"))


def words(names: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def fair_advice(table: pd.DataFrame, pooled: pd.DataFrame) -> str:
    """What to do, in three sentences that follow the corrected verdicts (`fair_answer`'s marks): where the last layer
    stands, whether a fusion of all layers is ahead of the best single layer anywhere, and whether the probe's
    ensembles are ahead across settings (`selection.pooled_comparison`)."""
    judged = verdicts(table)
    if judged.empty or pooled.empty:
        return ""
    across = pooled.set_index("method")
    settings = judged.groupby(["backbone", "dataset", "n_shot"]).ngroups
    last = judged[judged.method == LAST_LAYER]
    trailing = int((last.verdict == "trails").sum())
    first = (
        "Probe the layers first (`dwatt probe`) and keep the head of the layer your dev set chooses: the last "
        f"layer trails it in {'every setting' if trailing == settings else f'{trailing} of {settings} settings'} "
        "above."
        if trailing
        else "Probe the layers first (`dwatt probe`): the last layer is not shown behind the layer your dev set chooses "
        "in any setting above, and the probe costs little."
    )
    fusions = judged[judged.method.isin(FUSIONS_OF_ALL_LAYERS)]
    pooled_verdict = lambda method: across.loc[method].verdict if method in across.index else ""
    across_ahead = [m for m in FUSIONS_OF_ALL_LAYERS if pooled_verdict(m) == "beats"]
    somewhere = [
        m
        for m in FUSIONS_OF_ALL_LAYERS
        if m not in across_ahead and (fusions[fusions.method == m].verdict == "beats").any()
    ]
    behind = [m for m in FUSIONS_OF_ALL_LAYERS if pooled_verdict(m) == "trails"]
    said = []
    if across_ahead:
        said.append(
            f"{words(across_ahead)} {'is' if len(across_ahead) == 1 else 'are'} ahead of that layer across "
            "settings (last row)"
        )
    if somewhere:
        said.append(f"{words(somewhere)} in the settings marked ▲ only")
    second = (
        "Of the fusions of every layer, " + "; ".join(said)
        if said
        else "No fusion of every layer (ScalarMix, Concat, Base+n, DWAtt) is shown ahead of that layer, in any setting "
        "or across them, once the tests are corrected"
    )
    second += f"; {words(behind)} trail{'s' if len(behind) == 1 else ''} it across settings." if behind else "."
    ensembles = [m for m in ENSEMBLE_METHODS.values() if m in across.index]
    winners = [m for m in ensembles if across.loc[m].verdict == "beats"]
    if winners:
        best = winners[0]
        size = best.split("-")[1].split(" ")[0]
        third = (
            f"Averaging the {best.removesuffix(' averaged')}' heads is ahead of it across settings "
            f"({across.loc[best].ahead:.0f} of {across.loc[best].ahead + across.loc[best].behind:.0f} trials, Holm "
            f"p = {across.loc[best].p_holm:.2g}), at no training cost: save it with `dwatt probe --save-ensemble {size}`."
        )
    elif (judged[judged.method.isin(ensembles)].verdict == "beats").any():
        third = (
            "Averaging the best layers' heads (`dwatt probe --save-ensemble 3`) is ahead only in the settings "
            "marked ▲, not across settings: the single layer's head is the simpler model to serve."
        )
    elif ensembles:
        third = (
            "Averaging the best layers' heads (`dwatt probe --save-ensemble 3`) is not shown ahead of that layer: "
            "the single layer's head is the simpler model to serve."
        )
    else:
        third = ""
    return " ".join(part for part in (first, second, third) if part) + "\n"


def pooled_table(pooled: pd.DataFrame) -> str:
    """`selection.pooled_comparison` as a pipe table: each method's trials ahead of and behind the best single layer
    over every setting, the sign test's p before and after Holm's correction across methods, and the verdict."""
    if pooled.empty:
        return ""
    rows = pooled.assign(
        mean=pooled.mean_difference.map(lambda d: f"{d:+.2f}"),
        p=pooled.p_value.map(lambda p: f"{p:.2g}"),
        holm=pooled.p_holm.map(lambda p: f"{p:.2g}"),
    )
    return markdown(
        rows.rename(columns={"mean": "mean difference", "p": "sign test p", "holm": "Holm p"}),
        [
            "dataset",
            "method",
            "settings",
            "trials",
            "ahead",
            "behind",
            "mean difference",
            "sign test p",
            "Holm p",
            "verdict",
        ],
    )


def kinds(judged: pd.DataFrame, plural: bool = False) -> str:
    """What the judged methods of a table are: fusions, and probe ensembles where the table has them."""
    s = "s" if plural else ""
    return f"fusion{s} or probe ensemble{s}" if judged.method.isin(ENSEMBLE_METHODS.values()).any() else f"fusion{s}"


def difference_words(row, unit: str) -> str:
    """A verdict row's paired difference to the best single layer, with its CI and unit: "+0.75 ± 4.73 F1"."""
    return f"{with_interval(row.minus_best_layer, row.minus_best_layer_ci95, sign=True)} {unit}"


def datasets_of(judged: pd.DataFrame) -> str:
    return ", ".join(DATASET_NAMES.get(name, name) for name in dict.fromkeys(judged.dataset))


def last_layer_words(last: pd.DataFrame, unit: str) -> str:
    """How the last layer compares with the best single layer, as its paired CIs say: the settings where it trails
    (by how much), then each setting where it does not (its difference)."""
    if last.empty:
        return ""
    trailing, others = last[last.verdict == "trails"], last[last.verdict != "trails"]
    parts = []
    if not trailing.empty:
        least, most = (f"{-value:.1f}" for value in (trailing.minus_best_layer.max(), trailing.minus_best_layer.min()))
        where = "" if others.empty else f" in {len(trailing)} of {len(last)} settings"
        parts.append(
            f"the last layer trails the best one{where} by {least if least == most else f'{least} to {most}'} {unit}"
        )
    if not others.empty:
        said = {"level": "level with the best one (95% CI spans 0)", "beats": "ahead of the best one"}
        subject = "it is" if parts else "the last layer is"
        parts.append(
            f"{subject} "
            + "; ".join(
                f"{said[verdict]} on "
                + ", ".join(
                    f"{row.backbone} at N = {row.n_shot:g} ({difference_words(row, unit)})"
                    for row in rows.itertuples()
                )
                for verdict, rows in others.groupby("verdict", sort=False)
            )
        )
    return "; " + ", and ".join(parts)


def few_shot_dev_sections(frame: pd.DataFrame, tables: Path) -> list[str]:
    """The fair comparison again with every choice (epoch, learning rate, layer) made on each trial's few-shot dev
    sample, where the runs made one (`RunConfig.few_shot_dev`): its answer, verdicts, regret and table, written
    beside the others (`*_few_shot_dev.md`)."""
    table = fair_comparison(frame, few_shot_dev=True)
    if table.empty:
        return []
    pooled = pooled_comparison(frame, few_shot_dev=True)
    texts = {
        "fair_answer": fair_answer(table, pooled),
        "fair_verdicts": verdict_lines(table),
        "regret": regret_table(table),
        "fair_comparison": fair_table(table),
        "pooled": pooled_table(pooled),
    }
    for name, text in texts.items():
        (tables / f"{name}_few_shot_dev.md").write_text(text)
    return [
        "## Chosen as a few-shot user chooses: on a dev sample as large as the training sample\n",
        f"Every choice made again on each trial's own dev sample ({dev_size_words(table)}, drawn uniformly from "
        "the dev sentences above, another draw each trial), each choice's test score as before.\n",
        texts["fair_answer"],
        texts["fair_verdicts"],
        "**Across settings, on the few-shot dev sample**\n",
        texts["pooled"],
        "**Selection regret on the few-shot dev sample**\n",
        texts["regret"],
        texts["fair_comparison"],
    ]


def no_dev_sections(frame: pd.DataFrame, tables: Path) -> list[str]:
    """With no dev set (`selection.no_dev_comparison`): the last layer and every fusion at `dwatt train`'s FE rate,
    each at its last epoch, where the runs scored it; written to `no_dev.md`."""
    table = no_dev_comparison(frame)
    if table.empty:
        return []
    metric = table.metric.iloc[0]
    rows = table.assign(
        N=table.n_shot.map(lambda n: f"{n:g}"),
        score=[with_interval(m, c) for m, c in zip(table.test_score, table.test_ci95)],
        minus=[
            with_interval(m, c, sign=True) if not pd.isna(m) else ""
            for m, c in zip(table.minus_last_layer, table.minus_last_layer_ci95)
        ],
    )
    text = "".join(
        f"**{backbone}, {dataset}: test {metric} at the last epoch, learning rate {rate:g}**\n\n"
        + markdown(
            group.rename(columns={"score": f"test {metric}", "minus": "− last layer"}),
            ["N", "method", f"test {metric}", "− last layer", "trials"],
        )
        + "\n"
        for (backbone, dataset, rate), group in rows.groupby(["backbone", "dataset", "learning_rate"], sort=False)
    )
    (tables / "no_dev.md").write_text(text)
    return [
        "## With no dev set: the last epoch at `dwatt train`'s learning rate\n",
        "A user with no dev set cannot choose a layer, a learning rate or an epoch: the head on the last layer and "
        f"each fusion train at `dwatt train`'s FE rate and keep their last epoch's weights. Test {metric}, mean ± 95% "
        "CI over trials, and the difference to the last layer's, paired by trial (runs of `--few-shot-dev`, which "
        "score their last epoch too).\n",
        text,
    ]


def write_fair_report(frame: pd.DataFrame, output: Path, title: str, sources: str) -> Path:
    """The report of a fair-comparison grid (`dwatt.experiment.selection`): every method at its own learning rate, the best
    single layer among all, chosen on dev and scored on test; the probe of every layer; the figure."""
    table = fair_comparison(frame)
    curve = probe_curve(frame)
    table.to_csv(output / "tables" / "fair_comparison.csv", index=False)
    curve.to_csv(output / "tables" / "probe.csv", index=False)
    fair = fair_table(table)
    (output / "tables" / "fair_comparison.md").write_text(fair)
    answers = verdict_lines(table) if not table.empty else ""
    (output / "tables" / "fair_verdicts.md").write_text(answers)
    pooled = pooled_comparison(frame)
    pooled.to_csv(output / "tables" / "pooled.csv", index=False)
    pooled_text = pooled_table(pooled)
    (output / "tables" / "pooled.md").write_text(pooled_text)
    answer = fair_answer(table, pooled) if not table.empty else ""
    (output / "tables" / "fair_answer.md").write_text(answer)
    advice = fair_advice(table, pooled) if not table.empty else ""
    (output / "tables" / "fair_advice.md").write_text(advice)
    regrets = regret_table(table)
    (output / "tables" / "regret.md").write_text(regrets)
    covered = coverage_table(coverage(frame))
    (output / "tables" / "coverage.md").write_text(covered)
    # the dev scores the choices were made on stay in the CSV files: a table shows test scores only
    metric = table.metric.iloc[0] if not table.empty else "F1"
    probe = (
        markdown(
            curve.drop(columns=["dev_score", "metric"])
            .assign(layer=curve.layer.astype(int), test_score=curve.test_score.round(2))
            .rename(columns={"test_score": f"test {metric}"})
        )
        if not curve.empty
        else ""
    )
    (output / "tables" / "probe.md").write_text(probe)
    parts = [
        f"# {title}\n",
        f"Generated by `dwatt report` from {sources} ({len(frame)} runs). Each method's learning rate (and the best "
        f"single layer's layer) is chosen per trial by the best dev {metric} ({METRIC_DEFINITIONS.get(metric, metric)}, "
        f"best epoch); the table reports the test {metric} of that choice, mean ± 95% CI (Student's t) over "
        "trials, and its difference to the best single layer's, paired by trial. A method beats or trails the best "
        "single layer where Holm's correction over the table's method-setting pairs leaves p < 0.05 (Student's "
        "paired t); across settings, a sign test over every trial, Holm-corrected across methods. Where several "
        "runs tie on dev, the method's test score is the mean of theirs.\n",
        answer,
        advice,
        answers,
        "## Across settings: each method's trials against the best single layer\n",
        pooled_text,
        fair,
        "## Selection regret: what choosing on dev cost\n",
        f"The test {metric} of each method's run chosen on dev minus the best test {metric} among the runs it chose "
        "from (its learning rates; for the best single layer, every layer at every rate; each run at its dev-chosen "
        f"epoch), mean ± 95% CI over trials: 0 where dev chose what test would have. Dev set: "
        f"{dev_size_words(table)}.\n",
        regrets,
        "## Coverage: the runs the stores hold against the grid their rows span\n",
        covered,
        f"## A Base head on each layer (test {metric} at the dev-chosen learning rate, mean over trials)\n",
        probe,
    ]
    parts += few_shot_dev_sections(frame, output / "tables")
    parts += no_dev_sections(frame, output / "tables")
    figures = output / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    figure = figure_probe(frame)
    if figure is not None:
        save(figure, figures, "probe")
        parts.append(f"![test {metric} by layer, fusions as lines](figures/probe.png)\n")
    report = output / "report.md"
    report.write_text("\n".join(parts))
    return report
