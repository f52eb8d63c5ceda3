"""Does reading a decoder's layers through its final norm change the probe's choice or its score?

`--through-final-norm` (`DWAttConfig.through_final_norm`) makes a head on layer k of a decoder LLM the stock
`<Family>ForTokenClassification` cut to k layers, so that it exports without remote code. This runs `dwatt probe` twice
on each setting, the same samples, seeds, dev subset, rates and epochs, once reading the layers as they leave each layer
(the default: the last one as the backbone returns it, normed) and once through the norm, and compares what each
chooses on dev: the layer and rate per trial and over the trials, the chosen head's mean dev and test score, and each
layer's best mean dev score (its largest difference and the rank correlation over the layers).

    python benchmarks/final_norm.py --backbone models/SmolLM2-135M-Instruct-q4 --task ner --n-shot 32 \
        --dev-sentences 1000 --trials 3 --output-root runs/widen --threads 1
    python benchmarks/final_norm.py --backbone models/SmolLM2-135M-Instruct-q4 --task cls --n-shot 16 \
        --dev-sentences 1000 --trials 3 --output-root runs/widen-agnews --threads 1
    python benchmarks/final_norm.py --backbone models/Qwen2.5-Coder-1.5B-Instruct-q4 --task ner --n-shot 32 \
        --dev-sentences 1000 --trials 3 --output-root runs/fsd --threads 1 --max-memory 6GiB --cache-on-disk
    python benchmarks/final_norm.py --backbone models/Qwen2.5-Coder-1.5B-Instruct-q4 --task cls --n-shot 16 \
        --dev-sentences 1000 --trials 3 --output-root runs/agnews --threads 1 --max-memory 6GiB --cache-on-disk

Each setting is a section of `results/final_norm.json` and `.md` next to this file (a setting run again replaces
its own); the probes' stores go under `--work` (resumed when run again), their feature caches under `--output-root`
(the read-as-is arm finds the caches the committed grids built there).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import results_files
import torch

from dwatt.cli.options import add_max_memory_argument

HERE = Path(__file__).resolve().parent
ARMS = {"as_is": False, "through_final_norm": True}


def probe(settings: dict, normed: bool, work: Path) -> dict:
    """One arm: the probe's choice per trial and over the trials, with its scores and each layer's best dev score."""
    from dwatt.experiment.probe import ProbeSettings, run_probe
    from dwatt.training import EXECUTION

    arm = "through_final_norm" if normed else "as_is"
    outcome = run_probe(
        ProbeSettings(
            **settings,
            through_final_norm=normed,
            test=True,
            baselines=False,
            save_model=False,
            progress=False,
            results=str(work / arm / "results.jsonl"),
        ),
        EXECUTION,
    )
    layer, rate = outcome.chosen
    best = {str(k): round(max(outcome.mean(k, r) for r in outcome.rates), 2) for k in outcome.layers}
    return {
        "chosen_layer": layer,
        "chosen_rate": rate,
        "chosen_dev": round(outcome.mean(layer, rate), 2),
        "chosen_test": round(outcome.mean(layer, rate, "test"), 2),
        "per_trial": {
            str(trial): {
                "layer": k,
                "rate": r,
                "dev": round(outcome.scores[trial, k, r]["dev"], 2),
                "test": round(outcome.scores[trial, k, r]["test"], 2),
            }
            for trial, (k, r) in outcome.chosen_per_trial.items()
        },
        "last_layer_best_dev": best[str(max(outcome.layers))],
        "best_dev_by_layer": best,
        "rates": outcome.rates,
        "edges": outcome.edges(),
    }


def compare(arms: dict) -> dict:
    from scipy.stats import spearmanr

    plain, normed = arms["as_is"]["best_dev_by_layer"], arms["through_final_norm"]["best_dev_by_layer"]
    layers = [layer for layer in plain if layer in normed]
    differences = [normed[layer] - plain[layer] for layer in layers]
    return {
        "same_choice": (arms["as_is"]["chosen_layer"], arms["as_is"]["chosen_rate"])
        == (arms["through_final_norm"]["chosen_layer"], arms["through_final_norm"]["chosen_rate"]),
        "chosen_dev_difference": round(arms["through_final_norm"]["chosen_dev"] - arms["as_is"]["chosen_dev"], 2),
        "chosen_test_difference": round(arms["through_final_norm"]["chosen_test"] - arms["as_is"]["chosen_test"], 2),
        "largest_layer_difference": round(max(differences, key=abs), 2),
        "mean_layer_difference": round(statistics.fmean(differences), 2),
        "spearman_by_layer": round(float(spearmanr([plain[k] for k in layers], [normed[k] for k in layers])[0]), 3),
    }


def markdown(result: dict) -> str:
    head = [
        "# A decoder's layers read through its final norm, against as they leave each layer\n",
        "`dwatt probe` twice per setting (same samples, seeds, dev subset, rates, epochs; `--test`, widened where a "
        "layer's best rate sat at an edge); scores x 100, means over the trials. Generated by "
        "`benchmarks/final_norm.py`.\n",
    ]
    commands = [f"- {name}: `{setting['command']}` ({setting['cpu']})" for name, setting in result["settings"].items()]
    return "\n".join([*head, tables_text(result), *commands]) + "\n"


def edge_text(found: dict) -> str:
    """The layers whose best rate is still an edge of the rates tried, after the widening: where their optimum may
    lie beyond the grid."""
    rates = found["rates"]
    parts = [
        f"{', '.join(map(str, layers))} (at {min(rates) if edge == 'smallest' else max(rates):g})"
        for edge, layers in found["edges"].items()
        if layers
    ]
    return "; ".join(parts) or "none"


def tables_text(result: dict) -> str:
    """The two tables: each arm's choice and scores, then what reading through the norm changes."""
    lines = [
        "| setting | arm | chosen layer @ rate | dev | test | per trial (layer @ rate: test) | last layer's best dev | "
        "layers still best at an edge of the rates |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, setting in result["settings"].items():
        for arm in ARMS:
            found = setting["arms"][arm]
            trials = "; ".join(
                f"{t['layer']} @ {t['rate']:g}: {t['test']:.2f}" for _, t in sorted(found["per_trial"].items())
            )
            lines.append(
                f"| {name} | {arm.replace('_', ' ')} | {found['chosen_layer']} @ {found['chosen_rate']:g} | "
                f"{found['chosen_dev']:.2f} | {found['chosen_test']:.2f} | {trials} | {found['last_layer_best_dev']:.2f} | "
                f"{edge_text(found)} |"
            )
    lines += [
        "\n| setting | same choice | chosen dev, normed - as is | chosen test, normed - as is | each layer's best dev: "
        "largest difference | mean difference | Spearman over layers |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, setting in result["settings"].items():
        c = setting["comparison"]
        lines.append(
            f"| {name} | {'yes' if c['same_choice'] else 'no'} | {c['chosen_dev_difference']:+.2f} | "
            f"{c['chosen_test_difference']:+.2f} | {c['largest_layer_difference']:+.2f} | "
            f"{c['mean_layer_difference']:+.2f} | {c['spearman_by_layer']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", required=True)
    parser.add_argument("--task", default="ner", choices=("ner", "cls"))
    parser.add_argument("--n-shot", type=int, default=32)
    parser.add_argument("--dev-sentences", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--output-root", default="runs/final-norm", help="where the feature caches go")
    parser.add_argument("--work", default="runs/final-norm", help="where the probes' stores go")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=str(HERE / "results"))
    add_max_memory_argument(parser)  # the probes' budget and caches on disk, as `dwatt probe` takes them
    args = parser.parse_args(argv)
    from dwatt.portable import backbone_folder, portable_path

    torch.set_num_threads(args.threads)
    settings = {
        "backbone": args.backbone,
        "task": args.task,
        "n_shot": args.n_shot,
        "dev_sentences": args.dev_sentences,
        "epochs": args.epochs,
        "trials": args.trials,
        "output_root": args.output_root,
        "max_memory": args.max_memory,
        "cache_on_disk": args.cache_on_disk,
        "device_map": args.device_map,
    }
    name = f"{Path(backbone_folder(args.backbone)).name} {'CoNLL-03' if args.task == 'ner' else 'AG News'} N={args.n_shot}"
    work = Path(args.work) / name.replace(" ", "_")
    arms = {arm: probe(settings, normed, work) for arm, normed in ARMS.items()}
    path = Path(args.output) / "final_norm.json"
    result = json.loads(path.read_text()) if path.exists() else {"benchmark": "final_norm", "settings": {}}
    result["settings"][name] = {
        "command": results_files.command("final_norm.py", argv),
        "backbone": portable_path(args.backbone),
        "cpu": results_files.cpu_facts()["cpu"],
        "environment": results_files.environment(),
        "arms": arms,
        "comparison": compare(arms),
    }
    results_files.write(args.output, "final_norm", result, markdown(result))


if __name__ == "__main__":
    main()
