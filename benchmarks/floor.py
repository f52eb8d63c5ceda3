"""The floor under the fair comparison: what CoNLL-03 and AG News score with no backbone at all, on the very samples,
dev subsets and test splits the fair grids trained on, set against each backbone's best single layer.

Every sample of the fair stores (task, dataset, N, trial: the same for every backbone, as sampling reads only the
data and the seed) gets the majority label and the model with no backbone (`dwatt.experiment.baselines`: a CRF on
word features, or TF-IDF with logistic regression, its regularisation chosen on the same 1000 dev sentences or 800 dev
texts). They are kept in `floor_samples.json` (`dwatt.experiment.floor.scored_floor`: one entry a sample; a rerun
computes only the samples it lacks; `dwatt report --floor` reads the same file and puts the floor into the fair
tables as methods). The table
pairs each backbone's best single layer (chosen on dev per trial, as in the fair report) with the no-backbone model
on the same trials: the mean test difference, its 95% CI, and Student's paired t-test, Holm-corrected across the
settings of a dataset.

    python benchmarks/floor.py            # both fair grids; writes docs/results/floor/floor{_samples.json,.json,.md}
"""

from __future__ import annotations

import argparse
import math
from glob import glob
from pathlib import Path

from results_files import command, write

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "docs" / "results" / "floor"
# The stores each fair report reads (docs/results/fair-cpu/run.sh and fair-agnews/run.sh, `dwatt report`).
GRIDS = {
    "CoNLL-03": [
        "docs/results/fair-cpu/fair.*.jsonl",
        "docs/results/fair-few-shot-dev/fair.Qwen2.5-Coder-1.5B-Instruct-q4*.jsonl",
        "docs/results/fair-few-shot-dev/fair.embeddinggemma-300m*.jsonl",
        "docs/results/fair-few-shot-dev/fair.gemma3-270m-q4*.jsonl",
    ],
    "AG News": ["docs/results/fair-agnews/fair.*.jsonl"],
}
PREFER = {"AG News": ["docs/results/fair-agnews/fair.SmolLM2-135M-Instruct-q4.probe-ensembles.jsonl"]}


def floor_table(grid: str, paths: list[str], store: Path, prefer: list[str] = ()) -> dict:
    """Per setting (backbone, N): the best single layer's test score, the floor's, and the paired difference."""
    from dwatt.experiment.floor import scored_floor
    from dwatt.experiment.methods import BEST_LAYER, with_methods
    from dwatt.experiment.selection import chosen_on_dev
    from dwatt.experiment.significance import holm, paired_p_value, verdict_of
    from dwatt.experiment.summaries import confidence_interval, load_rows, runs_frame

    rows = load_rows(paths, prefer)
    floor = scored_floor(rows, store)
    by_sample = {
        (row["sample"]["dataset"], row["sample"]["n_shot"], row["sample"]["seed"], row["sample"]["dev_sentences"]): row
        for row in floor
    }
    dev_sentences = {row["config"].get("dev_sentences") for row in rows}
    (dev_size,) = dev_sentences
    picks = chosen_on_dev(with_methods(runs_frame(rows)))
    best = picks[picks.method == BEST_LAYER]
    settings = []
    for (backbone, dataset, n_shot, epochs), group in best.groupby(["backbone", "dataset", "n_shot", "epochs"]):
        trials = sorted(int(trial) for trial in group.trial)
        layer = group.set_index("trial").test_score
        names = [score["name"] for score in by_sample[dataset, int(n_shot), trials[0], dev_size]["baselines"]]
        floors = {
            name: [
                next(s["test"] for s in by_sample[dataset, int(n_shot), t, dev_size]["baselines"] if s["name"] == name)
                for t in trials
            ]
            for name in names
        }
        no_backbone = floors[names[-1]]
        # the trials whose no-backbone choice stands at the widening's limit (its `chosen` says "at the ... tried")
        at_limit = sum(
            "tried:" in by_sample[dataset, int(n_shot), t, dev_size]["baselines"][-1]["chosen"] for t in trials
        )
        differences = [layer[t] - value for t, value in zip(trials, no_backbone)]
        settings.append(
            {
                "backbone": backbone,
                "dataset": dataset,
                "n_shot": int(n_shot),
                "epochs": int(epochs),
                "trials": len(trials),
                "metric": group.metric.iloc[0],
                "best_single_layer": float(layer.mean()),
                **{name: float(sum(values) / len(values)) for name, values in floors.items()},
                "no_backbone_ci95": confidence_interval(no_backbone),
                "no_backbone_at_limit": at_limit,
                "layer_minus_no_backbone": float(sum(differences) / len(differences)),
                "layer_minus_no_backbone_ci95": confidence_interval(differences),
                "p": paired_p_value(differences),
            }
        )
    for setting, adjusted in zip(settings, holm([s["p"] for s in settings])):
        setting["holm_p"] = adjusted
        setting["verdict"] = verdict_of(setting["layer_minus_no_backbone"], adjusted)
    return {"grid": grid, "dev_sentences": dev_size, "baselines": names, "settings": settings}


def _number(value: float, width: float | None = None, sign: bool = False) -> str:
    if math.isnan(value):
        return "—"
    text = f"{value:+.2f}" if sign else f"{value:.2f}"
    return text if width is None or math.isnan(width) else f"{text} ± {width:.2f}"


def _p(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.2g}"


def _at_limit(setting: dict) -> str:
    count = setting.get("no_backbone_at_limit", 0)
    return f" ({count} of {setting['trials']} chosen at a widening limit)" if count else ""


def tables_text(result: dict) -> str:
    """Each grid's table under a heading of its own, as the floor's page and docs/results.md quote them."""
    lines = []
    for table in result["tables"]:
        majority, no_backbone = table["baselines"]
        metric = table["settings"][0]["metric"] if table["settings"] else ""
        lines += [
            f"**{table['grid']}** ({metric}, test; choices on {table['dev_sentences']} dev examples):",
            "",
            f"| setting | trials | best single layer | {no_backbone} | {majority} | best layer − no backbone | Holm p "
            "| verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in table["settings"]:
            lines.append(
                f"| {s['backbone']}, N = {s['n_shot']} | {s['trials']} | {s['best_single_layer']:.2f} | "
                f"{_number(s[no_backbone], s['no_backbone_ci95'])}{_at_limit(s)} | {s[majority]:.2f} | "
                f"{_number(s['layer_minus_no_backbone'], s['layer_minus_no_backbone_ci95'], sign=True)} | "
                f"{_p(s['holm_p'])} | {s['verdict']} |"
            )
        lines.append("")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    return "\n".join(
        [
            "# The floor: the fair comparison's samples with no backbone",
            "",
            f"`{result['command']}` ([the script](../../../benchmarks/floor.py)). Each fair grid's samples (the "
            "same for every backbone) scored by the majority label and by a model with no backbone, its "
            "regularisation chosen on the grid's dev examples; each backbone's best single layer chosen on dev per "
            "trial as in the fair report. 'best layer − no backbone' is the paired test difference over the same "
            "trials (mean ± 95% CI), tested by Student's paired t-test, Holm-corrected across the settings of a "
            "grid; the verdict says `beats` where the corrected p is below 0.05. A no-backbone cell names the trials whose "
            "regularisation was chosen at the limit of its widened grid (3 steps past the grid asked for).",
            "",
        ]
    ) + tables_text(result)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grids", default=",".join(GRIDS), help="comma-separated, of: " + ", ".join(GRIDS))
    parser.add_argument("--output", default=str(OUTPUT.relative_to(REPO)))
    args = parser.parse_args(argv)
    output = REPO / args.output
    tables = [
        floor_table(
            grid,
            sorted(path for pattern in GRIDS[grid] for path in glob(str(REPO / pattern))),
            output / "floor_samples.json",
            [str(REPO / path) for path in PREFER.get(grid, [])],
        )
        for grid in args.grids.split(",")
    ]
    result = {"command": command("floor.py", argv), "tables": tables}
    write(output, "floor", result, markdown(result))


if __name__ == "__main__":
    main()
