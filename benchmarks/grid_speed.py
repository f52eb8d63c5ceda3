"""Wall time of a few-shot FE grid with the feature cache: every epoch budget its own `Trainer` run (the plain
cached loop, one head at a time) against the budgets of a run trained together (`dwatt.budgets`), in one process.

Both engines run the same grid through `dwatt.sweep.run_sweep` into their own results file; the feature and model
memos are emptied before each, so both pay for computing the backbone's features once per sample and for building
each fusion's first model of a trial. The time to build a model with and without the memo is measured on its own. Their dev F1 scores are
not identical run for run (the batch order is drawn differently) but follow the same protocol: the table gives
the mean of each fusion under both.

    python benchmarks/grid_speed.py          # the GPU benchmark: RoBERTa-large shape (random weights), the paper's
                                             # grid for one trial (x 5 projects the 5-trial grid)
    python benchmarks/grid_speed.py --backbone models/all-MiniLM-L6-v2 --n-shots 32 --budgets 5,10,15,20 \\
        --dev-sentences 1000 --threads 2     # the CPU measurement committed in results/grid_speed_cpu.*

Writes `results/grid_speed_<device>.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertConfig, BertModel

import results_files
from dwatt import training
from dwatt.defaults import ROBERTA_LARGE_SHAPE, default_backbone_path
from dwatt.sweep import grid, run_sweep

HERE = Path(__file__).resolve().parent
ENGINES = ("budgets", "trainer")


def random_large_backbone(folder: Path, tokenizer_folder: str | None = None) -> Path:
    """A BERT encoder in RoBERTa-large's shape with random weights and MiniLM's tokenizer (speed does not depend on
    the weights, and no RoBERTa weights exist offline)."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder or default_backbone_path())
    shape = dict(ROBERTA_LARGE_SHAPE, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    BertModel(BertConfig(**shape), add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def time_model_builds(backbone: Path, fusions: list[str], repeats: int = 3) -> list[dict]:
    """Seconds to build a model for a run: the first build of a fusion and seed (a random backbone initialised,
    then overwritten by the pretrained one) against later, remembered builds (`training.InitialModels`)."""
    rows = []
    for fusion in fusions:
        memo = training.InitialModels()
        seconds = []
        for _ in range(1 + repeats):
            started = time.perf_counter()
            model = memo.build(str(backbone), fusion, 0, num_labels=9)
            seconds.append(time.perf_counter() - started)
            del model
        rows.append({"fusion": fusion, "first_build_seconds": round(seconds[0], 2),
                     "remembered_build_seconds": round(sorted(seconds[1:])[len(seconds[1:]) // 2], 2)})
    return rows


def time_engine(engine: str, specs, folder: Path) -> dict:
    training.FEATURE_MEMO.clear()  # each engine computes its features and builds its models afresh
    training.INITIAL_MODELS.clear()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    rows = run_sweep(specs, folder / f"{engine}.jsonl", folder / engine, progress=False, engine=engine)
    seconds = time.perf_counter() - started
    f1 = {}
    for row in rows:
        f1.setdefault(row["spec"]["fusion"], []).append(100 * row["best_dev_f1"])
    return {
        "engine": engine,
        "runs": len(rows),
        "wall_seconds": round(seconds, 2),
        "mean_best_dev_f1": {fusion: round(sum(v) / len(v), 2) for fusion, v in f1.items()},
    }


def markdown(result: dict) -> str:
    s = result["settings"]
    by_engine = {row["engine"]: row for row in result["engines"]}
    lines = [
        f"# FE grid wall time: {s['backbone']}, {len(s['fusions'])} fusions x N {s['n_shots']} x budgets "
        f"{s['budgets']} x {s['trials']} trial(s)\n",
        f"Device: {result['environment']['device_name']}; torch {result['environment']['torch']}; dev: "
        f"{s['dev_sentences'] or 'full split'} sentences scored after every epoch; batch 16. "
        f"Command: `{result['command']}`\n",
        "| engine | runs | wall s | mean best dev F1 per fusion |",
        "|---|---|---|---|",
    ]
    for row in result["engines"]:
        scores = ", ".join(f"{fusion} {f1:.2f}" for fusion, f1 in row["mean_best_dev_f1"].items())
        lines.append(f"| {row['engine']} | {row['runs']} | {row['wall_seconds']:.1f} | {scores} |")
    if set(by_engine) == set(ENGINES):
        lines.append(f"\nSpeed-up (trainer / budgets): **{result['speedup']:.2f}x**.")
    if s["trials"] < 5:
        lines.append(
            f"Projected wall time of the 5-trial grid (x {5 / s['trials']:g}): "
            + ", ".join(f"{row['engine']} {row['wall_seconds'] * 5 / s['trials'] / 60:.1f} min" for row in result["engines"])
            + "."
        )
    lines += ["", "Building a run's model on a RoBERTa-large-shaped backbone (random weights; median of the remembered builds):",
              "", "| fusion | first build s | remembered build s |", "|---|---|---|"]
    lines += [f"| {r['fusion']} | {r['first_build_seconds']:.2f} | {r['remembered_build_seconds']:.2f} |" for r in result["model_build"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default="random-large", help="a model folder, or random-large")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder for random-large (default: MiniLM's)")
    parser.add_argument("--fusions", default="base,base_plus_n,concat,dwatt")
    parser.add_argument("--n-shots", default="8,16,32,64,128")
    parser.add_argument("--budgets", default="25,50,75,100")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--dev-sentences", type=int, default=None)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    listed = lambda text, kind=str: [kind(item) for item in text.split(",") if item]
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        backbone = random_large_backbone(scratch / "backbone", args.tokenizer) if args.backbone == "random-large" else Path(args.backbone)
        specs = grid(
            fusions=listed(args.fusions), n_shots=listed(args.n_shots, int), epochs=listed(args.budgets, int),
            trials=args.trials, backbones=(str(backbone),), dev_sentences=args.dev_sentences,
        )
        engines = [time_engine(engine, specs, scratch) for engine in listed(args.engines)]
        large = backbone if args.backbone == "random-large" else random_large_backbone(scratch / "large", args.tokenizer)
        builds = time_model_builds(large, listed(args.fusions))
    times = {row["engine"]: row["wall_seconds"] for row in engines}
    result = {
        "settings": {
            "backbone": "random RoBERTa-large shape" if args.backbone == "random-large" else backbone.name,
            "fusions": listed(args.fusions), "n_shots": listed(args.n_shots, int), "budgets": listed(args.budgets, int),
            "trials": args.trials, "dev_sentences": args.dev_sentences,
        },
        "engines": engines,
        "speedup": times["trainer"] / times["budgets"] if set(times) == set(ENGINES) else None,
        "model_build": builds,
        "environment": results_files.environment(),
        "command": results_files.command("grid_speed.py", argv),
    }
    results_files.write(args.output, f"grid_speed_{'cuda' if torch.cuda.is_available() else 'cpu'}", result, markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
