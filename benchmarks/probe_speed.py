"""What a probe of every layer costs: Base heads on each layer trained together on one FE feature cache, against one
Base run on the same cache.

On one few-shot CoNLL-03 sample (N x 4 sentences, a fixed dev subset, the cache of every layer built once before
timing and shared by every setting, as a sweep shares it), in interleaved rounds with the order rotated, the first
setting timed twice as the noise control:
- one Base run on the last layer, as `dwatt train --fusion base` trains it (the `Trainer`);
- the same run through the heads engine (`dwatt.stacked_heads.train_heads`), alone;
- the probe: a Base head on every layer, one learning rate, trained together (`dwatt probe`, `dwatt sweep
  --probe-layers all`);
- the probe at four learning rates (every layer x 5e-5, 3e-4, 1e-3, 3e-3).
Each time is the whole run: model build (remembered across runs, as in a sweep), training, dev scoring after every
epoch, results. The probe's target: at most 3x one Base run (a head per layer, one after the other, would be 30x
on a 30-layer model).

    python benchmarks/probe_speed.py --backbone models/SmolLM2-135M-Instruct-q4 --rounds 3

Writes `results/probe_speed_cpu.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import results_files
import torch
from transformers import AutoConfig

from dwatt.portable import backbone_folder, portable_path
from dwatt.training import RunConfig, run_ner, run_together

HERE = Path(__file__).resolve().parent
CONTROL = "one Base run (Trainer)"
RATES = (5e-5, 3e-4, 1e-3, 3e-3)


def readme_text(result: dict) -> str:
    """What the docs say of the committed measurement (tests/test_readme.py checks it is this)."""
    s, ratio = result["settings"], result["ratios"]
    return (
        f"Probing all {s['layers']} layers of {Path(s['backbone']).name} (N = {s['n_shot']}, {s['epochs']} epochs, "
        f"{s['dev_sentences']} dev sentences scored after every epoch) took {ratio['probe, 1 learning rate']:.2f}x "
        f"the wall time of one Base run on the same cache ({result['median']['probe, 1 learning rate']:.1f} s "
        f"against {result['median'][CONTROL]:.1f} s), and {ratio['probe, 4 learning rates']:.2f}x at four "
        f"learning rates; median of {s['rounds']} interleaved rounds, noise control {result['noise_control']:.3f}.\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default=None, help="Hub id or folder (default: the packaged MiniLM)")
    parser.add_argument("--n-shot", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--dev-sentences", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work-dir", default="runs/bench-probe")
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    from dwatt.defaults import default_backbone_path

    folder = backbone_folder(args.backbone) if args.backbone else default_backbone_path()
    layers = AutoConfig.from_pretrained(folder).num_hidden_layers

    def config(layer: int, rate: float, name: str) -> RunConfig:
        return RunConfig(
            backbone=args.backbone,
            fusion="base",
            layers=str(layer),
            mode="fe",
            n_shot=args.n_shot,
            epochs=args.epochs,
            dev_sentences=args.dev_sentences,
            learning_rate=rate,
            seed=0,
            output_dir=f"{args.work_dir}/{name}/{layer}-{rate:g}",
            save_model=False,
            progress=False,
        )

    scores: dict[str, list] = {}

    def record(name: str, results: list[dict]) -> None:
        scores.setdefault(name, []).append([round(r["best_dev_f1"], 6) for r in results])

    settings = {
        CONTROL: lambda: record(CONTROL, [run_ner(config(layers, 5e-5, "trainer"))]),
        "one Base run (heads engine)": lambda: record("engine", run_together([config(layers, 5e-5, "engine")])),
        "probe, 1 learning rate": lambda: record(
            "probe", run_together([config(k, 5e-5, "probe") for k in range(1, layers + 1)])
        ),
        "probe, 4 learning rates": lambda: record(
            "probe4", run_together([config(k, rate, "probe4") for k in range(1, layers + 1) for rate in RATES])
        ),
    }
    # The warm-up round builds the feature cache of every layer (and the remembered model) once, for all settings.
    timings = results_files.interleaved_timings(settings, args.rounds, CONTROL, warmup=1)
    median = {name: round(seconds, 2) for name, seconds in timings["median"].items()}
    ratios = {name: round(seconds / median[CONTROL], 3) for name, seconds in median.items()}
    result = {
        "settings": {
            "backbone": portable_path(args.backbone) if args.backbone else "sentence-transformers/all-MiniLM-L6-v2",
            "layers": layers,
            "n_shot": args.n_shot,
            "epochs": args.epochs,
            "dev_sentences": args.dev_sentences,
            "rounds": args.rounds,
            "learning_rates": list(RATES),
        },
        "seconds": timings["seconds"],
        "median": median,
        "ratios": ratios,
        "noise_control": round(timings["noise_control"], 3),
        "same_scores_every_round": {name: len({tuple(s) for s in runs}) == 1 for name, runs in scores.items()},
        "probe_last_layer_equals_the_engine_run": scores["probe"][0][-1] == scores["engine"][0][0],
        "environment": results_files.environment(),
        "command": results_files.command("probe_speed.py", argv),
        "threads": torch.get_num_threads(),
        "median_of_seconds": statistics.median(median.values()),
    }
    device = "cuda" if torch.cuda.is_available() else "cpu"
    lines = [
        f"# Probe speed: a Base head on every layer against one Base run ({result['environment']['device_name']})\n",
        f"Command: `{result['command']}`. One CoNLL-03 sample, the feature cache of every layer built before "
        "timing; median wall time of interleaved rounds, the order rotated, the Trainer's Base run timed twice "
        f"(noise control **{result['noise_control']:.3f}**).\n",
        "| setting | seconds | x one Base run |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {median[name]:.1f} | {ratios[name]:.2f} |" for name in median]
    lines += ["", readme_text(result)]
    results_files.write(args.output, f"probe_speed_{device}", result, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
