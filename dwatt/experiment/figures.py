"""The paper's figures (and one it lacks) drawn with matplotlib from a runs frame (`dwatt.experiment.summaries.runs_frame`).

Each `figure_*` function draws one figure when the runs it needs are present and returns the figure, or `None`;
`draw_all` saves each as PNG and SVG. Error bars are 95% confidence intervals over trials.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = "dwatt"  # the same figure gives the same SVG bytes
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from specs_dwatt import FUSION_SPECS  # noqa: E402

from .methods import fusion_methods, window_methods  # noqa: E402
from .selection import fair_comparison, probe_curve  # noqa: E402
from .summaries import (  # noqa: E402
    DEPTH_EPOCHS,
    MODE_NAMES,
    PROBE_FUSION,
    TIERS,
    backbone_layers,
    conll_fe_grid,
    depth_grid,
    fusion_names,
    headline_budget,
    scored_by,
    summarize,
    tier_summary,
    token_weighted,
)


def figure_probe(frame: pd.DataFrame):
    """Test score of a Base head on each layer (each at its dev-chosen learning rate) against each fusion's at
    its own dev-chosen learning rate (horizontal lines; dotted, dash-dotted: on a window around the best layer, with
    the
    last layer or alone), one panel per
    backbone and N (the fair comparison)."""
    curve, fair = probe_curve(frame), fair_comparison(frame)
    if curve.empty:
        return None
    panels = list(curve.groupby(["backbone", "n_shot"]).groups)
    figure, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.4), squeeze=False)
    for axis, (backbone, n_shot) in zip(axes[0], panels):
        layers = curve[(curve.backbone == backbone) & (curve.n_shot == n_shot)].sort_values("layer")
        axis.plot(
            layers.layer,
            layers.test_score,
            "o-",
            color=color_of(PROBE_FUSION),
            markersize=3,
            label="Base head on layer k",
        )
        lines = [(fusion, method, "--") for fusion, method in fusion_methods().items()]
        # a window: the fusion's colour, dotted (with the last layer) or dash-dotted (alone)
        lines += [(fusion, method, "-." if alone else ":") for (fusion, alone), method in window_methods().items()]
        for fusion, method, style in lines:
            chosen = fair[(fair.backbone == backbone) & (fair.n_shot == n_shot) & (fair.method == method)]
            if not chosen.empty:
                axis.axhline(
                    chosen.test_score.iloc[0], color=color_of(fusion), linestyle=style, linewidth=1.2, label=method
                )
        axis.set(title=f"{backbone}, N={n_shot:g}", xlabel="layer", ylabel=f"test {layers.metric.iloc[0]}")
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return figure


TIER_ORDER = [name for _, name in TIERS]


def color_of(fusion: str) -> str | None:
    """The colour a fusion's spec draws it in (`FusionSpec.color`); None (matplotlib's next) for rows of no fusion."""
    spec = FUSION_SPECS.get(fusion)
    return spec.color if spec else None


def _fusions(frame: pd.DataFrame) -> list[str]:
    """The fusions of `frame`'s rows: those a spec declares by name, then the others by name."""
    present = set(frame.fusion)
    return sorted(present & FUSION_SPECS.keys()) + sorted(present - FUSION_SPECS.keys())


def _lines(
    axis,
    runs: pd.DataFrame,
    title: str,
    x: str = "n_shot",
    value: str = "f1",
    label: str = "dev F1",
    xlabel: str = "N (N x C training sentences)",
) -> None:
    """Mean `value` of each fusion against `x` (N on a log scale, or the epoch budget), with 95% CI bars."""
    summary = summarize(runs, ["fusion", x], value)
    for fusion in _fusions(summary):
        points = summary[summary.fusion == fusion].sort_values(x)
        axis.errorbar(
            points[x],
            points["mean"],
            yerr=points.ci95.fillna(0),
            label=fusion_names().get(fusion, fusion),
            color=color_of(fusion),
            marker="o",
            capsize=3,
        )
    ticks = sorted(summary[x].unique())
    if x == "n_shot":
        axis.set_xscale("log", base=2)
    axis.set_xticks(ticks, [f"{t:g}" for t in ticks])
    axis.set(title=title, xlabel=xlabel if x == "n_shot" else "epoch budget", ylabel=label)
    axis.grid(alpha=0.3)


def _bars(axis, summary: pd.DataFrame, groups: list, group_column: str, names: dict | None = None) -> None:
    fusions = _fusions(summary)
    width = 0.8 / len(fusions)
    for k, fusion in enumerate(fusions):
        rows = summary[summary.fusion == fusion].set_index(group_column).reindex(groups)
        axis.bar(
            np.arange(len(groups)) + (k - (len(fusions) - 1) / 2) * width,
            rows["mean"],
            width,
            yerr=rows.ci95.fillna(0),
            capsize=2,
            color=color_of(fusion),
            label=fusion_names().get(fusion, fusion),
        )
    axis.set_xticks(np.arange(len(groups)), [(names or {}).get(g, str(g)) for g in groups])
    axis.grid(axis="y", alpha=0.3)


def figure_f1_vs_n(frame: pd.DataFrame):
    """Figure 2: dev F1 against N at the largest epoch budget, one panel per backbone."""
    runs = conll_fe_grid(frame)
    if runs.empty:
        return None
    backbones = sorted(runs.backbone.unique())
    figure, axes = plt.subplots(1, len(backbones), figsize=(5.5 * len(backbones), 4), squeeze=False)
    for axis, backbone in zip(axes[0], backbones):
        own = runs[runs.backbone == backbone]
        budget = headline_budget(own)
        _lines(axis, own[own.epochs == budget], f"CoNLL-03 FE, {backbone}, {budget} epochs")
    axes[0][0].legend()
    return figure


def figure_budgets(frame: pd.DataFrame):
    """
    Figure 3: dev F1 against N for every epoch budget (one panel each), for the backbone with most runs. Where the
    budgets were not all run at several N (longer budgets at the largest N only, say), dev F1 against the budget
    instead, one panel per N that has several budgets.
    """
    runs = conll_fe_grid(frame)
    if runs.empty or runs.epochs.nunique() < 2:
        return None
    runs = runs[runs.backbone == runs.backbone.value_counts().index[0]]
    if (runs.groupby("epochs").n_shot.nunique() > 1).all():
        budgets = sorted(runs.epochs.unique())
        figure, axes = plt.subplots(1, len(budgets), figsize=(4.5 * len(budgets), 4), sharey=True, squeeze=False)
        for axis, budget in zip(axes[0], budgets):
            _lines(axis, runs[runs.epochs == budget], f"{budget} epochs")
    else:
        budgets_per_n = runs.groupby("n_shot").epochs.nunique()
        shots = sorted(budgets_per_n[budgets_per_n > 1].index)
        figure, axes = plt.subplots(1, len(shots), figsize=(5 * len(shots), 4), sharey=True, squeeze=False)
        for axis, n in zip(axes[0], shots):
            _lines(axis, runs[runs.n_shot == n], f"N={n:g}", x="epochs")
    axes[0][0].legend()
    figure.suptitle(f"CoNLL-03 FE, {runs.backbone.iloc[0]}: epoch budgets")
    return figure


def figure_dev_curves(frame: pd.DataFrame):
    """Figure 4: dev F1 after every epoch against optimizer steps, mean over trials, one panel per N."""
    runs = conll_fe_grid(frame)
    if runs.empty:
        return None
    runs = runs[runs.backbone == runs.backbone.value_counts().index[0]]
    runs = runs[runs.epochs == headline_budget(runs)]
    points = pd.DataFrame(
        [
            {"fusion": r.fusion, "n_shot": r.n_shot, "step": p["step"], "f1": 100 * p["f1"]}
            for r in runs.itertuples()
            for p in r.dev_curve
        ]
    )
    if points.empty:
        return None
    shots = sorted(points.n_shot.unique())
    figure, axes = plt.subplots(1, len(shots), figsize=(4 * len(shots), 3.6), sharey=True, squeeze=False)
    for axis, n in zip(axes[0], shots):
        curves = points[points.n_shot == n].groupby(["fusion", "step"], as_index=False).f1.mean()
        for fusion in _fusions(curves):
            curve = curves[curves.fusion == fusion]
            axis.plot(curve.step, curve.f1, color=color_of(fusion), label=fusion_names().get(fusion, fusion))
        axis.set(title=f"N={n:g}", xlabel="optimizer step")
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("dev F1")
    axes[0][0].legend()
    figure.suptitle(f"CoNLL-03 FE, {runs.backbone.iloc[0]}, {runs.epochs.max()} epochs: dev F1 during training")
    return figure


def _wikiann(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame.language.notna()]  # WikiAnn: the datasets with a language


def figure_wikiann_english(frame: pd.DataFrame):
    """Figure 5: WikiAnn English, 100 training sentences: dev F1 per fusion."""
    runs = _wikiann(frame)
    runs = runs[runs.language == "en"]
    if runs.empty:
        return None
    summary = summarize(runs, ["fusion"], "f1")
    figure, axis = plt.subplots(figsize=(5, 3.6))
    _bars(axis, summary.assign(group="en"), ["en"], "group")
    axis.set(
        title=f"WikiAnn en, {runs.backbone.iloc[0]}, {runs.epochs.max()} epochs ({summary.trials.max()} trials)",
        ylabel="dev F1",
    )
    axis.legend()
    return figure


def figure_fe_vs_ft(frame: pd.DataFrame):
    """Figure 6: FE against FT (and LoRA, between them), one panel per N: the settings run in more than one mode on the
    same backbone, budget and dev set."""
    runs = frame[frame.dataset == "conll2003"]
    if runs.empty or runs["mode"].nunique() < 2:
        return None
    setting = ["backbone", "n_shot", "epochs", "num_dev_sentences"]
    runs = runs[runs.groupby(setting, dropna=False)["mode"].transform("nunique") >= 2]
    if runs.empty:
        return None
    modes = [mode for mode in MODE_NAMES if mode in set(runs["mode"])]
    shots = sorted(runs.n_shot.unique())
    figure, axes = plt.subplots(1, len(shots), figsize=(5 * len(shots), 3.8), squeeze=False)
    for axis, n in zip(axes[0], shots):
        summary = summarize(runs[runs.n_shot == n], ["fusion", "mode"], "f1")
        _bars(axis, summary, modes, "mode", names=MODE_NAMES)
        # F1's own range: a t-interval over two trials can reach past it, and is cut at its edges
        axis.set(title=f"N={n:g}, {runs.epochs.max()} epochs", ylabel="dev F1", ylim=(0, 100))
    axes[0][0].legend()
    return figure


def figure_base_vs_large(frame: pd.DataFrame):
    """Figure 7: the same fusions on backbones of different size, dev F1 against N, one panel per fusion."""
    runs = conll_fe_grid(frame)
    if runs.empty or runs.backbone.nunique() < 2:
        return None
    runs = runs[runs.epochs == headline_budget(runs)]
    fusions = _fusions(runs)
    figure, axes = plt.subplots(1, len(fusions), figsize=(4 * len(fusions), 3.6), sharey=True, squeeze=False)
    for axis, fusion in zip(axes[0], fusions):
        summary = summarize(runs[runs.fusion == fusion], ["backbone", "n_shot"], "f1")
        for style, backbone in zip(("-", "--", ":"), sorted(summary.backbone.unique())):
            points = summary[summary.backbone == backbone].sort_values("n_shot")
            axis.errorbar(
                points.n_shot,
                points["mean"],
                yerr=points.ci95.fillna(0),
                linestyle=style,
                marker="o",
                color=color_of(fusion),
                capsize=3,
                label=backbone,
            )
        axis.set_xscale("log", base=2)
        axis.set(title=fusion_names().get(fusion, fusion), xlabel="N")
        axis.legend(fontsize=7)
    axes[0][0].set_ylabel("dev F1")
    return figure


def figure_wikiann_languages(frame: pd.DataFrame):
    """Figure 8: WikiAnn dev F1 per language, languages ordered by resource tier."""
    runs = _wikiann(frame)
    if runs.language.nunique() < 2:
        return None
    order = (
        runs.drop_duplicates("language")
        .assign(rank=lambda t: t.tier.map(TIER_ORDER.index))
        .sort_values(["rank", "language"])
    )
    languages = list(order.language)
    summary = summarize(runs, ["fusion", "language"], "f1")
    figure, axis = plt.subplots(figsize=(max(8, 0.55 * len(languages) * len(_fusions(summary)) / 2), 4))
    _bars(axis, summary, languages, "language")
    axis.set_xticks(
        np.arange(len(languages)), [f"{lang}\n{t}" for lang, t in zip(order.language, order.tier)], fontsize=7
    )
    axis.set(
        title=f"WikiAnn, {runs.backbone.iloc[0]}, 100 training sentences, {runs.epochs.max()} epochs", ylabel="dev F1"
    )
    axis.legend(ncol=len(_fusions(summary)), fontsize=8)
    return figure


def figure_wikiann_tiers(frame: pd.DataFrame):
    """Figure 9: WikiAnn dev F1 per resource tier: mean of language means, CI over languages."""
    tiers = tier_summary(frame)
    if tiers.empty or tiers.tier.nunique() < 2:
        return None
    present = [t for t in TIER_ORDER if t in set(tiers.tier)]
    figure, axis = plt.subplots(figsize=(7, 3.8))
    _bars(axis, tiers, present, "tier")
    counts = tiers.groupby("tier").languages.max()
    axis.set_xticks(np.arange(len(present)), [f"{t}\n({counts[t]} languages)" for t in present])
    axis.set(title="WikiAnn by resource tier (size of the training split)", ylabel="dev F1")
    axis.legend(fontsize=8)
    return figure


def figure_layer_weights(frame: pd.DataFrame):
    """New: DWAtt's mean attention over layers per gold entity type, at the largest N and budget of a dataset."""
    runs = frame[frame.fusion.isin(token_weighted()) & frame.layer_weights.notna() & (frame["mode"] == "fe")]
    if runs.empty:
        return None
    datasets = list(dict.fromkeys(["conll2003", "wikiann:en", *runs.dataset]))
    datasets = [d for d in datasets if d in set(runs.dataset)][:2]
    figure, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 3.4), squeeze=False)
    for axis, dataset in zip(axes[0], datasets):
        own = runs[runs.dataset == dataset]
        if dataset == "conll2003" and not (grid := conll_fe_grid(own)).empty:  # the paper's protocol, no side runs
            own = grid
        own = own[own.backbone == own.backbone.value_counts().index[0]]
        own = own[own.epochs == headline_budget(own)]
        own = own[own.n_shot == own.n_shot.max()]
        types = sorted(own.layer_weights.iloc[0]["by_type"], key=lambda t: (t == "O", t))
        weights = np.array(
            [
                [
                    np.mean([w["by_type"][t][k] for w in own.layer_weights if t in w["by_type"]])
                    for k in range(len(own.layer_weights.iloc[0]["layers"]))
                ]
                for t in types
            ]
        )
        image = axis.imshow(weights, aspect="auto", cmap="viridis")
        axis.set_yticks(range(len(types)), types)
        layers = own.layer_weights.iloc[0]["layers"]
        axis.set_xticks(range(len(layers)), [str(k) for k in layers])
        axis.set(xlabel="layer", title=f"{dataset}, {own.backbone.iloc[0]}, N={own.n_shot.max():g}, {len(own)} runs")
        figure.colorbar(image, ax=axis, label="mean weight")
    figure.suptitle("DWAtt layer weights per gold entity type (dev tokens)")
    return figure


def figure_layer_weights_by_depth(frame: pd.DataFrame):
    """New: where DWAtt looks on backbones of different depths (the depth grid, CoNLL-03 FE): its mean weight on each
    layer per gold entity type at the largest N, one panel per backbone (a 30-layer decoder LLM beside encoders)."""
    runs = depth_grid(frame)
    runs = runs[runs.fusion.isin(token_weighted()) & runs.layer_weights.notna()]
    if runs.empty:
        return None
    backbones = sorted(set(runs.backbone), key=lambda b: -backbone_layers(runs).get(b, 0))
    figure, axes = plt.subplots(len(backbones), 1, figsize=(10, 2.6 * len(backbones)), squeeze=False)
    for axis, backbone in zip(axes[:, 0], backbones):
        own = runs[runs.backbone == backbone]
        own = own[own.n_shot == own.n_shot.max()]
        types = sorted(own.layer_weights.iloc[0]["by_type"], key=lambda t: (t == "O", t))
        layers = own.layer_weights.iloc[0]["layers"]
        weights = np.array(
            [
                [
                    np.mean([w["by_type"][t][k] for w in own.layer_weights if t in w["by_type"]])
                    for k in range(len(layers))
                ]
                for t in types
            ]
        )
        image = axis.imshow(weights, aspect="auto", cmap="viridis")
        axis.set_yticks(range(len(types)), types)
        axis.set_xticks(range(len(layers)), [str(k) for k in layers], fontsize=7)
        axis.set(
            xlabel="layer",
            title=f"{backbone} ({len(layers)} layers), N={own.n_shot.max():g}, {len(own)} trial{'s' * (len(own) > 1)}",
        )
        figure.colorbar(image, ax=axis, label="mean weight")
    figure.suptitle(f"DWAtt layer weights by depth (CoNLL-03 dev tokens, {DEPTH_EPOCHS} epochs)")
    return figure


def figure_classification(frame: pd.DataFrame):
    """New: few-shot text classification, accuracy and macro-F1 against N (examples per class) per fusion, at the
    largest epoch budget, one row per dataset, backbone and mode."""
    runs = scored_by(frame, "accuracy")
    if runs.empty:
        return None
    groups = list(runs.groupby(["dataset", "backbone", "mode"]))
    figure, axes = plt.subplots(len(groups), 2, figsize=(11, 4 * len(groups)), squeeze=False)
    for row, ((dataset, backbone, mode), own) in zip(axes, groups):
        pooling = own.pooling.fillna("").value_counts().index[0]  # the grid's pooling (the one most runs used)
        own = own[(own.pooling.fillna("") == pooling) & (own.epochs == own.epochs.max())]
        title = f"{dataset} {MODE_NAMES.get(mode, mode)}, {backbone}, {own.epochs.max()} epochs" + (
            f", {pooling} pooling" if pooling else ""
        )
        for axis, (value, label) in zip(row, (("accuracy", "accuracy"), ("macro_f1", "macro-F1"))):
            _lines(
                axis,
                own,
                title,
                value=value,
                label=f"{label} (evaluation split)",
                xlabel="N (training examples per class)",
            )
    axes[0][0].legend()
    return figure


FIGURES = {
    "fig2_f1_vs_n": figure_f1_vs_n,
    "fig3_epoch_budgets": figure_budgets,
    "fig4_dev_curves": figure_dev_curves,
    "fig5_wikiann_en": figure_wikiann_english,
    "fig6_fe_vs_ft": figure_fe_vs_ft,
    "fig7_base_vs_large": figure_base_vs_large,
    "fig8_wikiann_languages": figure_wikiann_languages,
    "fig9_wikiann_tiers": figure_wikiann_tiers,
    "layer_weights": figure_layer_weights,
    "layer_weights_by_depth": figure_layer_weights_by_depth,
    "text_classification": figure_classification,
}


def draw_all(frame: pd.DataFrame, folder: str | Path) -> tuple[list[str], list[str]]:
    """Save every figure the runs allow as PNG and SVG into `folder`; return the names drawn and those skipped."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    drawn, skipped = [], []
    for name, draw in FIGURES.items():
        figure = draw(frame) if not frame.empty else None
        if figure is None:  # and a figure drawn from earlier results does not linger beside the new ones
            skipped.append(name)
            for suffix in ("png", "svg"):
                (folder / f"{name}.{suffix}").unlink(missing_ok=True)
            continue
        save(figure, folder, name)
        drawn.append(name)
    return drawn, skipped


def save(figure, folder: Path, name: str) -> None:
    """`figure` as `name`.png and .svg in `folder` (the SVG without a date, so that it is the same bytes again)."""
    figure.tight_layout()
    for suffix in ("png", "svg"):
        figure.savefig(folder / f"{name}.{suffix}", dpi=120, metadata={"Date": None} if suffix == "svg" else None)
    plt.close(figure)
