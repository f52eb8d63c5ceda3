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
from .fair_report import write_fair_report
from .figures import FIGURES, draw_all
from .floor import floor_rows, scored_floor
from .selection import is_fair_grid
from .summaries import (  # noqa: F401  (re-exported: the report's API reads runs through them)
    DEPTH_DEV_SENTENCES,
    DEPTH_EPOCHS,
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
    fusion_names,
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
from .table_text import epochs, markdown, with_interval

# The paper's numbers that our README compares against (DWAtt, COLING 2024): Figure 2 at N=128 and 100 epochs,
# RoBERTa-large, FE; Table 3, WikiText-2 test perplexity, FT.
PAPER = {
    "conll_n128_e100_dwatt_minus_base_plus_n": 5.28,
    "conll_n128_e100_dwatt_minus_concat": 1.6,
    "wikitext2_perplexity": {"base": 2.90, "dwatt": 2.91, "base_plus_n": 2.98, "concat": 3.44},
}


def pivot_f1(summary: pd.DataFrame, index: str, columns: str = "fusion") -> pd.DataFrame:
    """`mean ± ci` cells, one row per `index` value and one column per fusion."""
    cells = summary.assign(cell=[with_interval(m, c) for m, c in zip(summary["mean"], summary["ci95"])])
    table = cells.pivot(index=index, columns=columns, values="cell").reset_index()
    table[index] = table[index].astype(str)
    table.columns = [fusion_names().get(c, c) for c in table.columns]
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
                        f"| CoNLL-03 FE dev F1, DWAtt − {fusion_names()[other]} at the largest N | "
                        f"+{PAPER[key]:.2f} (N=128, 100 epochs) | {with_interval(gains.mean(), confidence_interval(gains), sign=True)} | "
                        f"{backbone}, N={n:g}, {epochs(budget)}, {len(gains)} trial{'s' * (len(gains) > 1)} |"
                    )
    mlm = mlm_summary(frame)
    for row in mlm.itertuples(index=False):
        paper = PAPER["wikitext2_perplexity"].get(row.fusion)
        lines.append(
            f"| WikiText-2 test perplexity, {fusion_names()[row.fusion]} | {f'{paper:.2f}' if paper else '—'} | "
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
    names = fusion_names()
    fusions = [f for f in names if f in set(grid.fusion) | set(news.fusion)]
    header = ["backbone (layers)", "task, N", *(names[f] for f in fusions), "DWAtt − Base", "DWAtt − Concat"]
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
            lines.append(f"| {n:g} | {fusion_names().get(fusion, fusion)} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines) + "\n\nIn brackets: trials, the same samples in every mode of a row.\n")
    return "\n".join(parts)


def write_report(
    paths: list[str | Path],
    output: str | Path,
    title: str = "Results",
    prefer: Sequence[str | Path] = (),
    floor: str | Path | None = None,
) -> Path:
    """Tables (Markdown + CSV) and figures (PNG + SVG) for every experiment the results contain, written into a
    scratch folder beside `output` and moved into place only when all of them are written: a report that fails
    (unreadable results, no runs, a figure that cannot be drawn) leaves the earlier report as it was. `prefer`:
    stores whose row of a run is taken where another store holds that run with other results (`load_rows`).
    `floor`: a file of the floor's scores (`floor.scored_floor`: the samples it lacks are scored into it first),
    whose majority label and no-backbone model join a fair grid's tables as methods, paired by trial."""
    output = Path(output)
    rows = load_rows(paths, prefer)
    if not rows:
        raise ValueError(f"{', '.join(map(str, paths))}: no runs to report")
    frame = runs_frame(rows)
    baselines = runs_frame(floor_rows(rows, scored_floor(rows, Path(floor)))) if floor is not None else None
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
            write_fair_report(frame, staging, title, sources, baselines)
        elif baselines is not None:
            raise ValueError(f"{', '.join(map(str, paths))}: the floor (--floor) is a column of a fair grid's tables")
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


def ner_sections(ner: pd.DataFrame) -> list[str]:
    """A dev-F1 table per NER experiment, backbone and mode (WikiAnn's per language)."""
    if ner.empty:
        return []
    parts = []
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
    return parts


def tier_sections(tiers: pd.DataFrame) -> list[str]:
    """WikiAnn's dev F1 by resource tier."""
    if tiers.empty:
        return []
    order = [name for _, name in TIERS if name in set(tiers.tier)]
    return [
        "## WikiAnn by resource tier (training-split size): dev F1\n",
        markdown(pivot_f1(tiers.assign(tier=pd.Categorical(tiers.tier, categories=order)), "tier")),
    ]


def classification_sections(classification: pd.DataFrame, output: Path) -> list[str]:
    """Accuracy and macro-F1 tables per dataset, backbone and mode; the same tables, under bold titles, written to
    `tables/text_classification.md` for the README (which holds them inside a section of its own)."""
    if classification.empty:
        return []
    parts, embedded = [], []
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
    return parts


def mlm_sections(mlm: pd.DataFrame) -> list[str]:
    """WikiText-2's test and dev perplexity (the paper's Table 3)."""
    if mlm.empty:
        return []
    table = mlm.assign(**{"test perplexity": mlm.mean_test_ppl.round(2), "dev perplexity": mlm.mean_dev_ppl.round(2)})
    return [
        "## WikiText-2 masked LM: perplexity (Table 3)\n",
        markdown(table, ["backbone", "mode", "fusion", "epochs", "test perplexity", "dev perplexity"]),
    ]


def comparison_sections(frame: pd.DataFrame, output: Path) -> list[str]:
    """Fusion against the last layer by depth, the training modes side by side and the comparison with the paper,
    each also written under `tables/`."""
    parts = []
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
    comparison = paper_comparison(frame)
    (output / "tables" / "paper_comparison.md").write_text(comparison)
    return parts + ["## Against the paper\n", comparison]


def write_full_report(frame: pd.DataFrame, output: Path, title: str, sources: str) -> Path:
    """The report of any results but a fair-comparison grid's, into `output`: a section per kind of experiment the
    results hold, each table also written under `tables/`, then the comparison with the paper and the figures."""
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
    parts += ner_sections(ner) + tier_sections(tiers) + classification_sections(classification, output)
    parts += mlm_sections(mlm) + comparison_sections(frame, output)
    drawn, skipped = draw_all(frame, output / "figures")
    parts.append("## Figures\n")
    parts += [f"![{name}](figures/{name}.png)\n" for name in drawn]
    if skipped:
        parts.append("Not drawn (no runs of that experiment in these results): " + ", ".join(skipped) + ".\n")
    report = output / "report.md"
    report.write_text("\n".join(parts))
    return report
