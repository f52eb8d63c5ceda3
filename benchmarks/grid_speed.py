"""Wall time of a few-shot FE grid with the feature cache: every epoch budget its own `Trainer` run (the plain
cached loop, one head at a time) against the budgets of a run trained together (`dwatt.stacked_heads`), in one process.

The engines run in interleaved rounds, the order rotated, the budgets engine timed twice a round as the noise
control. Each run goes through `dwatt.experiment.sweep.run_sweep` into a results file of its own; the feature and model
memos are emptied before each, so both pay for computing the backbone's features once per sample and for building
each fusion's first model of a trial. The time to build a model with and without the memo is measured on its own. Their
dev F1 scores are
not identical run for run (the batch order is drawn differently) but follow the same protocol: the table gives
the mean of each fusion under both.

    python benchmarks/grid_speed.py          # the GPU benchmark: RoBERTa-large shape (random weights), the paper's
                                             # grid for one trial (x 5 projects the 5-trial grid)
    python benchmarks/grid_speed.py --backbone models/all-MiniLM-L6-v2 --fusions concat,dwatt --n-shots 32 \\
        --budgets 5,10 --dev-sentences 500 --rounds 3   # the CPU measurement committed in results/grid_speed_cpu.*

Writes `results/grid_speed_<device>.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import results_files
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from dwatt import training
from dwatt.defaults import ROBERTA_LARGE_SHAPE, default_backbone_path
from dwatt.experiment.grid import grid
from dwatt.experiment.sweep import run_sweep

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
        rows.append(
            {
                "fusion": fusion,
                "first_build_seconds": round(seconds[0], 2),
                "remembered_build_seconds": round(sorted(seconds[1:])[len(seconds[1:]) // 2], 2),
            }
        )
    return rows


def run_engine(engine: str, specs, folder: Path) -> list[dict]:
    """The grid once with `engine`, into a results file of its own (a sweep skips the runs its file holds)."""
    training.FEATURE_MEMO.clear()  # each run of an engine computes its features and builds its models afresh
    training.INITIAL_MODELS.clear()
    store = folder / f"{engine}-{len(list(folder.glob(f'{engine}-*.jsonl')))}.jsonl"
    rows = run_sweep(specs, store, folder / store.stem, execution=training.EXECUTION, progress=False, engine=engine)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return rows


def time_engines(engines: list[str], specs, folder: Path, rounds: int) -> tuple[list[dict], float | None]:
    """Median wall time of each engine over interleaved rounds (order rotated; the first engine timed twice a round
    as the noise control when there are two), with each fusion's mean best dev F1 of its first run."""
    outputs: dict[str, list[list[dict]]] = {}

    def once(engine: str) -> None:
        outputs.setdefault(engine, []).append(run_engine(engine, specs, folder))

    settings = {engine: (lambda engine=engine: once(engine)) for engine in engines}
    if len(engines) > 1:
        timings = results_files.interleaved_timings(settings, rounds, engines[0])
    else:  # one engine: nothing to compare, so no control
        timings = {"median": {}, "noise_control": None}
        for engine, function in settings.items():
            started = time.perf_counter()
            function()
            timings["median"][engine] = time.perf_counter() - started
    rows = []
    for name, seconds in timings["median"].items():
        engine = name.replace(results_files.AGAIN, "")
        f1 = {}
        for row in outputs[engine][0]:
            f1.setdefault(row["spec"]["fusion"], []).append(100 * row["best_dev_f1"])
        rows.append(
            {
                "engine": name,
                "runs": len(outputs[engine][0]),
                "wall_seconds": round(seconds, 2),
                "mean_best_dev_f1": {fusion: round(sum(v) / len(v), 2) for fusion, v in f1.items()},
            }
        )
    noise = timings["noise_control"]
    return rows, None if noise is None else round(noise, 3)


def markdown(result: dict) -> str:
    s = result["settings"]
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
    if result["speedup"] is not None:
        lines.append(
            f"\nSpeed-up (trainer / budgets): **{result['speedup']:.2f}x**; median of {result['rounds']} "
            f"interleaved round(s), the order rotated, {ENGINES[0]} timed twice a round as the noise control "
            f"({ENGINES[0]} again / {ENGINES[0]}): **{result['noise_control']:.3f}**."
        )
    if s["trials"] < 5:
        lines.append(
            f"Projected wall time of the 5-trial grid (x {5 / s['trials']:g}): "
            + ", ".join(
                f"{row['engine']} {row['wall_seconds'] * 5 / s['trials'] / 60:.1f} min"
                for row in result["engines"]
                if not row["engine"].endswith(results_files.AGAIN)
            )
            + "."
        )
    lines += [
        "",
        "Building a run's model on a RoBERTa-large-shaped backbone (random weights; median of the remembered builds):",
        "",
        "| fusion | first build s | remembered build s |",
        "|---|---|---|",
    ]
    lines += [
        f"| {r['fusion']} | {r['first_build_seconds']:.2f} | {r['remembered_build_seconds']:.2f} |"
        for r in result["model_build"]
    ]
    return "\n".join(lines) + "\n"


def readme_text(result: dict) -> str:
    """What the README says of the committed CPU measurement (tests/test_readme.py checks it is this)."""
    s, times = result["settings"], {row["engine"]: row["wall_seconds"] for row in result["engines"]}
    return (
        f"{result['speedup']:.2f}× on a small grid ({s['backbone']}, {', '.join(s['fusions'])}, N = "
        f"{', '.join(map(str, s['n_shots']))}, budgets {'/'.join(map(str, s['budgets']))}, {s['dev_sentences']} dev "
        f"sentences; {times['budgets']:.0f} s against {times['trainer']:.0f} s, median of {result['rounds']} "
        f"interleaved rounds, noise control {result['noise_control']:.3f})\n"
    )


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
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds of the engines (median reported)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    listed = lambda text, kind=str: [kind(item) for item in text.split(",") if item]
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        backbone = (
            random_large_backbone(scratch / "backbone", args.tokenizer)
            if args.backbone == "random-large"
            else Path(args.backbone)
        )
        specs = grid(
            fusions=listed(args.fusions),
            n_shots=listed(args.n_shots, int),
            epochs=listed(args.budgets, int),
            trials=args.trials,
            backbones=(str(backbone),),
            dev_sentences=args.dev_sentences,
        )
        engines, noise_control = time_engines(listed(args.engines), specs, scratch, args.rounds)
        large = (
            backbone if args.backbone == "random-large" else random_large_backbone(scratch / "large", args.tokenizer)
        )
        builds = time_model_builds(large, listed(args.fusions))
    times = {row["engine"]: row["wall_seconds"] for row in engines}
    result = {
        "settings": {
            "backbone": "random RoBERTa-large shape" if args.backbone == "random-large" else backbone.name,
            "fusions": listed(args.fusions),
            "n_shots": listed(args.n_shots, int),
            "budgets": listed(args.budgets, int),
            "trials": args.trials,
            "dev_sentences": args.dev_sentences,
        },
        "engines": engines,
        "speedup": times["trainer"] / times["budgets"] if set(ENGINES) <= set(times) else None,
        "rounds": args.rounds,
        "noise_control": noise_control,
        "model_build": builds,
        "environment": results_files.environment(),
        "command": results_files.command("grid_speed.py", argv),
    }
    results_files.write(
        args.output, f"grid_speed_{'cuda' if torch.cuda.is_available() else 'cpu'}", result, markdown(result)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
