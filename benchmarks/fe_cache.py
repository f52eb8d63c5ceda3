"""FE training with and without the feature cache, side by side in one process.

The same run twice (same seed, so the same 64 x 4 sentences and the same initialisation): once reading cached
backbone features, once running the frozen backbone on every batch of every epoch (train and the full dev split).
Writes `results/fe_cache_<device>.json` and `.md` next to this file.

    python benchmarks/fe_cache.py                       # MiniLM (the offline default backbone), N=64, 25 epochs
    python benchmarks/fe_cache.py --backbone PATH --n-shot 16 --epochs 5
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

from dwatt.training import RunConfig, run_ner

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default=None)
    parser.add_argument("--fusion", default="dwatt")
    parser.add_argument("--n-shot", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dtype", default="float16")
    parser.add_argument("--work-dir", default="runs/bench-fe-cache")
    args = parser.parse_args(argv)

    runs = {}
    for name, use_cache in (("cached", True), ("uncached", False)):
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
        runs[name] = {
            "wall_seconds": result["wall_seconds"],
            "cache_seconds": result["cache_seconds"],
            "train_seconds": result["train_seconds"],
            "best_dev_f1": result["best_dev_f1"],
            "best_epoch": result["best_epoch"],
            "final_dev_f1": result["final_dev_f1"],
        }
        print(name, json.dumps(runs[name]), flush=True)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    report = {
        "benchmark": "fe_cache",
        "command": "python benchmarks/fe_cache.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "backbone": result["config"]["backbone"],
        "fusion": args.fusion,
        "n_shot": args.n_shot,
        "train_sentences": result["num_train_sentences"],
        "dev_sentences": 3250,
        "epochs": args.epochs,
        "seed": args.seed,
        "cache_dtype": args.cache_dtype,
        "device": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({torch.get_num_threads()} threads)",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "runs": runs,
        "speedup_wall": runs["uncached"]["wall_seconds"] / runs["cached"]["wall_seconds"],
        "dev_f1_difference_points": 100 * (runs["cached"]["best_dev_f1"] - runs["uncached"]["best_dev_f1"]),
    }
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    stem = out / f"fe_cache_{device}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    rows = [
        f"# FE feature cache: {report['fusion']}, N={args.n_shot} ({report['train_sentences']} sentences), "
        f"{args.epochs} epochs, seed {args.seed}",
        "",
        f"Device: {report['device']}; torch {report['torch']}; backbone `{Path(report['backbone']).name}`; "
        f"cache dtype {args.cache_dtype}; full dev split ({report['dev_sentences']} sentences) scored every epoch.",
        f"Command: `{report['command'].strip()}`",
        "",
        "| path | wall s | of which caching s | training + dev eval s | best dev F1 | best epoch |",
        "|---|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        rows.append(
            f"| {name} | {run['wall_seconds']:.1f} | {run['cache_seconds']:.1f} | {run['train_seconds']:.1f} | "
            f"{100 * run['best_dev_f1']:.2f} | {run['best_epoch']:g} |"
        )
    rows += [
        "",
        f"Speed-up (wall, uncached / cached): **{report['speedup_wall']:.2f}x**; "
        f"dev F1 difference (cached - uncached): {report['dev_f1_difference_points']:+.2f} points.",
    ]
    stem.with_suffix(".md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
