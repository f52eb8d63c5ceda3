"""The fair comparison's answer, as the README quotes it: one small table of each method's difference from the best
single layer per setting and across settings (`fair_answer`), and what to do, in three sentences that follow its
verdicts (`fair_advice`)."""

from __future__ import annotations

import pandas as pd

from specs_dwatt import FUSION_SPECS

from .floor import NO_BACKBONE
from .methods import BEST_LAYER, ENSEMBLE_METHODS, FLOOR_METHODS, LAST_LAYER, fusion_methods
from .selection import NO_INTERVAL, holm_family, verdicts
from .significance import EQUIVALENCE_MARGIN
from .table_text import datasets_of, dev_size_words, metric_unit, trials_text, with_interval, words

SHORT_NAMES = {
    LAST_LAYER: "last layer",
    **{name: name.removesuffix(" layers averaged") for name in ENSEMBLE_METHODS.values()},
}
MARKS = {"beats": " ▲", "trails": " ▼", "within": " ≈"}
EDGE_MARKS = {"largest": " ⇡", "smallest": " ⇣"}  # `selection.rate_edge`


def fair_answer(table: pd.DataFrame, across: pd.DataFrame | None = None, pooled: pd.DataFrame | None = None) -> str:
    """The fair comparison's answer as one small table: a row per setting (backbone, N), the best single layer's test
    score, and each method's paired difference from it (mean ± 95% CI), marked ▲/▼ where the Holm-corrected test finds
    it ahead/behind (`selection.with_corrected_verdicts`), ‡ where that verdict depends on how ties on dev are broken;
    a row with each method's difference across settings weighed alike (`across_settings.setting_weighted_comparison`)
    and one with its trials ahead (`across_settings.pooled_comparison`, secondary); and what the marks mean. Empty where no difference has an interval yet."""
    judged = verdicts(table)
    if judged.empty or (judged.verdict == NO_INTERVAL).all():
        return ""
    methods = [method for method in answer_methods() if method in set(judged.method)]
    metric = judged.metric.iloc[0]
    header = ["setting", "best single layer", *[SHORT_NAMES.get(method, method) for method in methods]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    empty: dict[str, list[str]] = {}  # method -> the settings it has no cell in
    for (backbone, dataset, n_shot, budget), rows in table.groupby(
        ["backbone", "dataset", "n_shot", "epochs"], sort=False
    ):
        best = rows[rows.method == BEST_LAYER]
        mine = judged[
            (judged.backbone == backbone)
            & (judged.dataset == dataset)
            & (judged.n_shot == n_shot)
            & (judged.epochs == budget)
        ].set_index("method")
        if best.empty:
            continue
        cells = []
        for method in methods:
            if method not in mine.index:
                cells.append("")
                empty.setdefault(method, []).append(f"{backbone} N = {n_shot:g}")
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
            edge = EDGE_MARKS.get(row.get("rate_edge", ""), "")
            cells.append(
                text + MARKS.get(row.verdict, "") + ("" if row.get("tie_robust", True) else " ‡") + edge + fewer
            )
        lines.append(
            f"| {backbone}, N = {n_shot:g} ({trials_text(best.trials.iloc[0])}) | {best.test_score.iloc[0]:.2f} | "
            + " | ".join(cells)
            + " |"
        )
    if across is not None and (across.settings >= 2).any():  # one setting: its own row says it all
        weighted = across.set_index("method")
        cells = [
            with_interval(weighted.loc[m].mean_difference, weighted.loc[m].ci95, sign=True)
            + MARKS.get(weighted.loc[m].verdict, "")
            + f" ({weighted.loc[m].settings:.0f})"
            if m in weighted.index
            else ""
            for m in methods
        ]
        lines.append("| every setting, weighed alike (random effects; settings) |  | " + " | ".join(cells) + " |")
    if pooled is not None and not pooled.empty:
        by_trials = pooled.set_index("method")
        cells = [
            f"{by_trials.loc[m].ahead:.0f} of {by_trials.loc[m].ahead + by_trials.loc[m].behind:.0f} ahead"
            + MARKS.get(by_trials.loc[m].verdict, "")
            if m in by_trials.index
            else ""
            for m in methods
        ]
        lines.append("| every trial: trials ahead (sign test, secondary) |  | " + " | ".join(cells) + " |")
    family = judged[(judged.method.map(holm_family) == "methods") & (judged.verdict != NO_INTERVAL)]
    unit = metric_unit(metric, metric)
    legend = (
        f"{datasets_of(judged)} test {metric}: the best single layer's, and each method's difference from it in "
        f"{unit} (mean ± 95% CI over trials, paired), each method at its own learning rate chosen on "
        f"{dev_size_words(table)}. ▲/▼: ahead/behind after Holm's correction (p < 0.05) over the {len(family)} "
        "method-setting pairs of the fusions and ensembles (every method of the full tables), the last layer's "
        + ("settings and the floor's" if judged.method.isin(FLOOR_METHODS.values()).any() else "settings")
        + f" corrected apart; ≈: within ±{EQUIVALENCE_MARGIN:g} {unit} of it (two one-sided t-tests, Holm-corrected "
        "over the same pairs); unmarked: neither shown, too few trials or too much spread to say."
    )
    if judged.method.isin(FLOOR_METHODS.values()).any():
        legend += (
            " The floor, on each trial's own sample and splits: the majority label, and a model with no backbone "
            "(a linear-chain CRF on word features for NER, TF-IDF word and character n-grams with logistic "
            "regression for text classification; its regularisation chosen on the same dev set); ▼ there: the "
            "backbone's best layer is ahead of it, ▲: it is ahead of the backbone's best layer."
        )
    if across is not None and (across.settings >= 2).any():
        legend += (
            " Every setting, weighed alike: each setting's mean difference combined by a random-effects "
            "meta-analysis (DerSimonian-Laird τ², Hartung-Knapp-Sidik-Jonkman 95% CI and t-test), Holm-corrected "
            "across methods, in brackets the settings with an interval; the verdict the advice follows. Settings "
            "are not independent (every backbone at a seed draws the same sample, a smaller N's the start of a larger "
            "one's): a mark there stands only where a t-test over the seeds, each seed's mean difference over the "
            "settings that drew its sample, Holm-corrected alike, shows it too."
        )
    if pooled is not None and not pooled.empty:
        legend += (
            " Every trial: trials ahead of the best single layer over every setting, a two-sided sign test, "
            "Holm-corrected across methods (secondary: a setting of 10 trials weighs more than one of 3)."
        )
    edges = [edge for edge in ("largest", "smallest") if (judged.get("rate_edge", pd.Series(dtype=str)) == edge).any()]
    if edges:
        legend += (
            " "
            + "; ".join(f"{EDGE_MARKS[edge].strip()}: chosen at the {edge} rate of its grid" for edge in edges)
            + " in most trials, so the optimum may lie beyond the grid."
        )
    if empty:
        legend += (
            " Empty cells: the method was not run in that setting (its grid's run.sh says why): "
            + "; ".join(f"{SHORT_NAMES.get(m, m)} on {', '.join(where)}" for m, where in empty.items())
            + "."
        )
    if "tie_robust" in judged and not judged.tie_robust.all():
        legend += " ‡: the verdict changes with how ties on dev are broken (the tie rule averages the tied runs)."
    return "\n".join(lines) + "\n\n" + legend + "\n"


def headline_fusions() -> list[str]:
    """The fusions of every layer the answer gives a column, as methods: each fusion but the probe's whose spec asks
    for one (`FusionSpec.headline`), in table order."""
    return [method for name, method in fusion_methods().items() if FUSION_SPECS[name].headline]


def answer_methods() -> list[str]:
    """The methods the answer gives a column, in its order."""
    return [LAST_LAYER, *ENSEMBLE_METHODS.values(), *headline_fusions(), *FLOOR_METHODS.values()]


def fair_advice(table: pd.DataFrame, across: pd.DataFrame) -> str:
    """What to do, in three sentences that follow the corrected verdicts (`fair_answer`'s marks): where the last layer
    stands, whether a fusion of all layers is ahead of the best single layer anywhere, and whether the probe's
    ensembles are ahead across settings weighed alike (`across_settings.setting_weighted_comparison`), naming the
    backbones a lead rests on."""
    judged = verdicts(table)
    if judged.empty or across.empty:
        return ""
    weighted = across.set_index("method")
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
    of_all_layers = headline_fusions()
    fusions = judged[judged.method.isin(of_all_layers)]
    verdict = lambda method: weighted.loc[method].verdict if method in weighted.index else ""
    resting = lambda method: (
        f" (resting on {weighted.loc[method].rests_on}: not shown without "
        + ("its settings)" if ", " not in weighted.loc[method].rests_on else "the settings of any one of them)")
        if method in weighted.index and weighted.loc[method].rests_on
        else ""
    )
    if not trailing and verdict(LAST_LAYER) == "beats":
        row = weighted.loc[LAST_LAYER]
        first = first.removesuffix(", and the probe costs little.") + (
            f"; across settings weighed alike it is ahead of that layer by "
            f"{with_interval(row.mean_difference, row.ci95, sign=True)} {metric_unit(judged.metric.iloc[0])}"
            f"{resting(LAST_LAYER)}: the last layer's head is a sound default, and the probe costs little to check."
        )
    across_ahead = [m for m in of_all_layers if verdict(m) == "beats"]
    somewhere = [
        m for m in of_all_layers if m not in across_ahead and (fusions[fusions.method == m].verdict == "beats").any()
    ]
    behind = [m for m in of_all_layers if verdict(m) == "trails"]
    said = []
    if across_ahead:
        said.append(
            f"{words([m + resting(m) for m in across_ahead])} {'is' if len(across_ahead) == 1 else 'are'} ahead of "
            "that layer across settings weighed alike"
        )
    if somewhere:
        said.append(f"{words(somewhere)} in the settings marked ▲ only")
    ran = [m for m in of_all_layers if m in set(judged.method)]
    second = (
        "Of the fusions of every layer, " + "; ".join(said)
        if said
        else f"No fusion of every layer ({words(ran or list(of_all_layers))}) is shown ahead of that layer, "
        "in any setting or across them, once the tests are corrected"
    )
    second += (
        f"; {words([m + resting(m) for m in behind])} trail{'s' if len(behind) == 1 else ''} it across settings."
        if behind
        else "."
    )
    ensembles = [m for m in ENSEMBLE_METHODS.values() if m in weighted.index]
    winners = [m for m in ensembles if weighted.loc[m].verdict == "beats"]
    if winners:
        best = winners[0]
        size = best.split("-")[1].split(" ")[0]
        row = weighted.loc[best]
        third = (
            f"Averaging the {best.removesuffix(' averaged')}' heads is ahead of it across settings weighed alike "
            f"({with_interval(row.mean_difference, row.ci95, sign=True)} over {row.settings:.0f} settings, Holm "
            f"p = {row.p_holm:.2g}{'; it rests on ' + row.rests_on + ', without whose settings it is not shown' if row.rests_on else ''}), "
            f"at no training cost: save it with `dwatt probe --save-ensemble {size}`."
        )
    elif (judged[judged.method.isin(ensembles)].verdict == "beats").any():
        third = (
            "Averaging the best layers' heads (`dwatt probe --save-ensemble 3`) is ahead only in the settings "
            "marked ▲, not across settings weighed alike: the single layer's head is the simpler model to serve."
        )
    elif ensembles:
        third = (
            "Averaging the best layers' heads (`dwatt probe --save-ensemble 3`) is not shown ahead of that layer "
            "across settings weighed alike: the single layer's head is the simpler model to serve."
        )
    else:
        third = ""
    return " ".join(part for part in (first, second, third, floor_advice(judged, weighted)) if part) + "\n"


def floor_advice(judged: pd.DataFrame, weighted: pd.DataFrame) -> str:
    """Whether the backbone earns its place: how the best single layer stands against the model with no backbone
    across settings weighed alike and per setting, and where that model is ahead (▲); empty without the floor."""
    method = FLOOR_METHODS[NO_BACKBONE]
    mine = judged[judged.method == method]
    if mine.empty:
        return ""
    unit = metric_unit(judged.metric.iloc[0])
    shown = int((mine.verdict == "trails").sum())
    across = weighted.loc[method] if method in weighted.index else None
    if across is not None and across.verdict == "trails":
        overall = (
            f"across settings weighed alike ({with_interval(-across.mean_difference, across.ci95, sign=True)} "
            f"{unit}) and in {shown} of {len(mine)} settings"
        )
    else:
        overall = f"in {shown} of {len(mine)} settings" + (
            ", not across settings weighed alike" if across is not None else ""
        )
    text = f"Against the floor: the best layer is ahead of a model with no backbone {overall}"
    ahead = [f"{b} N = {n:g}" for b, n, v in zip(mine.backbone, mine.n_shot, mine.verdict) if v == "beats"]
    if ahead:
        text += (
            f"; the model with no backbone is ahead of it on {words(ahead)}, where the backbone does not earn its cost"
        )
    return text + "."
