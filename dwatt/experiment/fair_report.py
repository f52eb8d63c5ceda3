"""The report of a fair-comparison grid (`dwatt.experiment.selection`): each method at its own learning rate chosen on
dev and scored on test against the best single layer, per setting and across settings; its answer, its advice, the
regret of choosing on dev, the runs' coverage, and the probe of every layer."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .across_settings import pooled_comparison, pooled_table, setting_weighted_comparison, setting_weighted_table
from .coverage import coverage
from .fair_answer import fair_advice, fair_answer
from .figures import figure_probe, save
from .methods import BEST_LAYER, ENSEMBLE_METHODS, FLOOR_METHODS, LAST_LAYER, methods
from .no_dev import no_dev_comparison
from .selection import NO_INTERVAL, fair_comparison, holm_family, probe_curve, verdicts
from .significance import EQUIVALENCE_MARGIN
from .table_text import dev_size_words, markdown, metric_definition, with_interval


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


# A floor's verdict against the best single layer, said from the backbone's side.
FLOOR_WORDS = {
    "trails": "the best layer is ahead of it",
    "beats": "ahead of the best layer",
    "within": f"within ±{EQUIVALENCE_MARGIN:g} of the best layer",
}


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
            chosen = mine[(mine.verdict == kind) & (mine.method.map(holm_family) == "methods")]
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
            f"(Holm-corrected p < 0.05): {listed('beats')}; within ±{EQUIVALENCE_MARGIN:g} of it (two one-sided tests, "
            f"Holm-corrected): {listed('within')}; neither shown: {listed('level')}; that trail it: {listed('trails')}"
        ]
        if ((mine.verdict == NO_INTERVAL) & (mine.method.map(holm_family) == "methods")).any():
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
        floor = mine[mine.method.isin(FLOOR_METHODS.values())]
        if not floor.empty:
            parts.append(
                ". The floor: "
                + ", ".join(
                    f"{m} {with_interval(d, c, sign=True)}"
                    + ("" if v in ("level", NO_INTERVAL) else f" ({FLOOR_WORDS[v]})")
                    for m, d, c, v in zip(
                        floor.method, floor.minus_best_layer, floor.minus_best_layer_ci95, floor.verdict
                    )
                )
            )
        for edge in ("largest", "smallest"):
            at_edge = rows[rows.rate_edge == edge].method.tolist()
            if at_edge:
                parts.append(
                    f". Chosen at the {edge} learning rate tried in most trials (the optimum may lie beyond it): "
                    f"{', '.join(at_edge)}"
                )
        lines.append("".join(parts) + ".")
    return "\n".join(lines) + "\n" if lines else ""


def coverage_table(covered: pd.DataFrame) -> str:
    """The coverage of a fair grid (`coverage.coverage`) as a pipe table, one row per backbone, dataset and N, one
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


def regret_table(table: pd.DataFrame) -> str:
    """Selection regret of a `fair_comparison` table as a pipe table, one row per backbone, dataset and N, one
    column per method: the test score of the run chosen on dev minus the best test score among the runs the method
    chose from, mean ± 95% CI over trials (0 where dev chose what test would have)."""
    table = table[~table.method.isin(FLOOR_METHODS.values())]  # chosen when the floor was scored: no regret here
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
    pivot = pivot[["backbone", "dataset", "n_shot", *[m for m in methods() if m in pivot]]]
    return markdown(pivot.rename(columns={"n_shot": "N"}).assign(N=lambda t: t.N.map(lambda n: f"{n:g}")))


# The methods the answer's table shows, in its order (the window fusions and ScalarMix+LD are in the full tables).
def kinds(judged: pd.DataFrame, plural: bool = False) -> str:
    """What the judged methods of a table are: fusions, and probe ensembles where the table has them."""
    s = "s" if plural else ""
    return f"fusion{s} or probe ensemble{s}" if judged.method.isin(ENSEMBLE_METHODS.values()).any() else f"fusion{s}"


def few_shot_dev_sections(frame: pd.DataFrame, tables: Path) -> list[str]:
    """The fair comparison again with every choice (epoch, learning rate, layer) made on each trial's few-shot dev
    sample, where the runs made one (`RunConfig.few_shot_dev`): its answer, verdicts, regret and table, written
    beside the others (`*_few_shot_dev.md`)."""
    table = fair_comparison(frame, few_shot_dev=True)
    if table.empty:
        return []
    across, pooled = setting_weighted_comparison(frame, few_shot_dev=True), pooled_comparison(frame, few_shot_dev=True)
    texts = {
        "fair_answer": fair_answer(table, across, pooled),
        "fair_verdicts": verdict_lines(table),
        "regret": regret_table(table),
        "fair_comparison": fair_table(table),
        "across_settings": setting_weighted_table(across),
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
        "**Across settings weighed alike, on the few-shot dev sample**\n",
        texts["across_settings"],
        "**Every trial (sign test, secondary), on the few-shot dev sample**\n",
        texts["pooled"],
        "**Selection regret on the few-shot dev sample**\n",
        texts["regret"],
        texts["fair_comparison"],
    ]


def no_dev_sections(frame: pd.DataFrame, tables: Path) -> list[str]:
    """With no dev set (`no_dev.no_dev_comparison`): the last layer and every fusion at `dwatt train`'s FE rate,
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


def write_fair_report(
    frame: pd.DataFrame, output: Path, title: str, sources: str, floor: pd.DataFrame | None = None
) -> Path:
    """The report of a fair-comparison grid (`dwatt.experiment.selection`): every method at its own learning rate, the best
    single layer among all, chosen on dev and scored on test; the probe of every layer; the figure. `floor`: the
    floor's rows (`floor.floor_rows`), methods of the tables that compare (not of the coverage, the probe or the
    few-shot dev sample's choices, which it did not make)."""
    compared = frame if floor is None else pd.concat([frame, floor], ignore_index=True)
    table = fair_comparison(compared)
    curve = probe_curve(frame)
    table.to_csv(output / "tables" / "fair_comparison.csv", index=False)
    curve.to_csv(output / "tables" / "probe.csv", index=False)
    fair = fair_table(table)
    (output / "tables" / "fair_comparison.md").write_text(fair)
    answers = verdict_lines(table) if not table.empty else ""
    (output / "tables" / "fair_verdicts.md").write_text(answers)
    across = setting_weighted_comparison(compared)
    across.to_csv(output / "tables" / "across_settings.csv", index=False)
    across_text = setting_weighted_table(across)
    (output / "tables" / "across_settings.md").write_text(across_text)
    pooled = pooled_comparison(compared)
    pooled.to_csv(output / "tables" / "pooled.csv", index=False)
    pooled_text = pooled_table(pooled)
    (output / "tables" / "pooled.md").write_text(pooled_text)
    answer = fair_answer(table, across, pooled) if not table.empty else ""
    (output / "tables" / "fair_answer.md").write_text(answer)
    advice = fair_advice(table, across) if not table.empty else ""
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
        f"single layer's layer) is chosen per trial by the best dev {metric} ({metric_definition(metric)}, "
        f"best epoch); the table reports the test {metric} of that choice, mean ± 95% CI (Student's t) over "
        "trials, and its difference to the best single layer's, paired by trial. A method beats or trails the best "
        "single layer where Holm's correction over the table's method-setting pairs leaves p < 0.05 (Student's "
        "paired t); across settings, settings weighed alike by a random-effects meta-analysis (DerSimonian-Laird, "
        "Hartung-Knapp-Sidik-Jonkman), Holm-corrected across methods, with the sign test over every trial beside it. "
        "Where several "
        "runs tie on dev, the method's test score is the mean of theirs.\n",
        answer,
        advice,
        answers,
        "## Across settings, weighed alike: each method against the best single layer\n",
        "Each setting's mean paired difference, combined by a random-effects meta-analysis (DerSimonian-Laird τ², "
        "Hartung-Knapp-Sidik-Jonkman 95% CI and t-test on settings − 1 degrees of freedom), Holm across methods. "
        "A setting needs 2 trials to enter; one whose trials all differ alike borrows the median spread of the "
        "method's other settings. The verdict rests on a backbone where recomputing the table without that backbone's "
        "settings (Holm again) loses it.\n",
        across_text,
        "## Across settings, every trial: the sign test (secondary)\n",
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
