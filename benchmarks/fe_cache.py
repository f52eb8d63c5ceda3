"""FE training with and without the feature cache, side by side in one process.

The same run (same seed, so the same N x 4 sentences and the same initialisation) once reading cached backbone
features and once running the frozen backbone on every batch of every epoch (train and the full dev split), in
interleaved rounds with the order rotated, the cached run timed twice a round as the noise control. The feature and
model memos are emptied before every run, so each cached run pays for computing its features. Writes
`results/fe_cache_<device>.json` and `.md` next to this file.

    python benchmarks/fe_cache.py                       # MiniLM (the offline default), N=64, 10 epochs, 3 rounds
    python benchmarks/fe_cache.py --backbone PATH --n-shot 16 --epochs 5 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import results_files
import torch

from dwatt import training
from dwatt.portable import portable_path
from dwatt.training import RunConfig, run_ner

HERE = Path(__file__).resolve().parent
RUNS = {"cached": True, "uncached": False}
CONTROL = "cached"  # timed twice a round: the ratio of its two copies is the run's noise


def readme_text(report: dict) -> str:
    """What the README says of the committed measurement (tests/test_readme.py checks it is this)."""
    runs = report["runs"]
    return (
        f"DWAtt FE, N = {report['n_shot']}, {report['epochs']} epochs, the full dev split every epoch, same seed "
        f"both ways: {report['speedup_wall']:.2f}× faster with the cache on the 2-core CPU "
        f"({runs['cached']['wall_seconds']:.1f} s against {runs['uncached']['wall_seconds']:.1f} s, median of "
        f"{report['rounds']} interleaved rounds, noise control {report['noise_control']:.3f}), dev F1 "
        f"{100 * runs['cached']['best_dev_f1']:.2f} against {100 * runs['uncached']['best_dev_f1']:.2f}.\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default=None)
    parser.add_argument("--fusion", default="dwatt")
    parser.add_argument("--n-shot", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dtype", default="float16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work-dir", default="runs/bench-fe-cache")
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)

    results: dict[str, list[dict]] = {}

    def run(name: str, use_cache: bool) -> None:
        training.FEATURE_MEMO.clear()  # every cached run computes its features afresh
        training.INITIAL_MODELS.clear()
        config = RunConfig(
            backbone=args.backbone,
            fusion=args.fusion,
            mode="fe",
            n_shot=args.n_shot,
            epochs=args.epochs,
            seed=args.seed,
            use_cache=use_cache,
            cache_dtype=args.cache_dtype,
            output_dir=f"{args.work_dir}/{name}",
            save_model=False,
            progress=False,
        )
        result = run_ner(config)
        results.setdefault(name, []).append(result)
        print(name, json.dumps({k: result[k] for k in ("wall_seconds", "cache_seconds", "best_dev_f1")}), flush=True)

    settings = {
        name: (lambda name=name, use_cache=use_cache: run(name, use_cache)) for name, use_cache in RUNS.items()
    }
    timings = results_files.interleaved_timings(settings, args.rounds, CONTROL)
    runs = {}
    for name in timings["median"]:
        done = results[name.replace(results_files.AGAIN, "")]
        runs[name] = {
            "wall_seconds": round(timings["median"][name], 2),
            "cache_seconds": round(statistics.median(r["cache_seconds"] for r in done), 2),
            "best_dev_f1": done[0]["best_dev_f1"],
            "best_epoch": done[0]["best_epoch"],
            "same_scores_every_round": len({r["best_dev_f1"] for r in done}) == 1,
        }
    last = results["cached"][0]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    report = {
        "benchmark": "fe_cache",
        "command": results_files.command("fe_cache.py", argv),
        "backbone": portable_path(last["config"]["backbone"]),
        "fusion": args.fusion,
        "n_shot": args.n_shot,
        "train_sentences": last["num_train_sentences"],
        "dev_sentences": last["num_dev_sentences"],
        "epochs": args.epochs,
        "seed": args.seed,
        "cache_dtype": args.cache_dtype,
        "rounds": args.rounds,
        "environment": results_files.environment(),
        "runs": runs,
        "noise_control": round(timings["noise_control"], 3),
        "speedup_wall": runs["uncached"]["wall_seconds"] / runs["cached"]["wall_seconds"],
        "dev_f1_difference_points": 100 * (runs["cached"]["best_dev_f1"] - runs["uncached"]["best_dev_f1"]),
    }
    lines = [
        f"# FE feature cache: {args.fusion}, N={args.n_shot} ({report['train_sentences']} sentences), {args.epochs} epochs, "
        f"seed {args.seed}",
        "",
        f"Device: {report['environment']['device_name']}; torch {report['environment']['torch']}; backbone "
        f"`{Path(report['backbone']).name}`; cache dtype {args.cache_dtype}; the full dev split scored every epoch. "
        f"Median wall time of {args.rounds} interleaved rounds (order rotated; the {CONTROL} run timed twice a round, "
        f"the noise control: **{report['noise_control']:.3f}**).",
        f"Command: `{report['command']}`",
        "",
        "| path | wall s | of which caching s | best dev F1 | best epoch | same F1 every round |",
        "|---|---|---|---|---|---|",
    ]
    for name, run_row in runs.items():
        lines.append(
            f"| {name} | {run_row['wall_seconds']:.1f} | {run_row['cache_seconds']:.1f} | "
            f"{100 * run_row['best_dev_f1']:.2f} | {run_row['best_epoch']:g} | {run_row['same_scores_every_round']} |"
        )
    lines += [
        "",
        f"Speed-up (wall, uncached / cached): **{report['speedup_wall']:.2f}x**; dev F1 difference "
        f"(cached - uncached): {report['dev_f1_difference_points']:+.2f} points.",
    ]
    results_files.write(args.output, f"fe_cache_{device}", report, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
