"""Rerun noise: the same runs made twice, and how far apart their results are, against the effects the fair
comparison reads.

Pairs of executions of one run (same settings, same seed, same sample):

- **same machine, same code** (`--train`): MiniLM, CoNLL-03, N = 32, trial 0, the probe of every layer and ScalarMix,
  Concat and DWAtt at the fair grid's five rates, trained twice on this CPU with the default engine (per-token heads
  stacked under vmap), and once more with every copy trained one after another (`run_together(vectorize=False)`);
- **another code version or device** (committed rows): the fair grid's rows that a probe trained again replaced
  (`docs/results/fair-*/superseded/`, against the rows that replaced them; SmolLM2's N = 128 probe first ran on an
  H100), and the AG News SmolLM2 probe of N = 16, trial 0, run on an H100 and again on this CPU.

For each pair: the test score's difference, whether the epoch chosen on dev changed, and the dev score's largest
difference over the epochs both scored; by learning rate, to see whether training at high rates amplifies float
differences. The effects they are set against: the fair comparison's paired differences from the best single layer.

    python benchmarks/rerun_noise.py --train     # trains the same-machine pairs (about 15 min on one core), then
    compares
    python benchmarks/rerun_noise.py             # compares what the stores hold

Writes `docs/results/rerun-noise/rerun_noise.json` and `.md` (the stores it trains go beside them).
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import sys
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "docs" / "results" / "rerun-noise"
RATES = (5e-5, 3e-4, 1e-3, 3e-3, 1e-2)
EXECUTIONS = {"first": True, "again": True, "one after another": False}  # name -> vectorize


def train(backbone: str, output: Path, threads: int) -> None:
    import torch

    from dwatt.execution import ExecutionOf
    from dwatt.experiment.grid import grid
    from dwatt.experiment.sweep import run_sweep
    from dwatt.training import run, run_together

    torch.set_num_threads(threads)
    specs = grid(
        fusions=("base", "scalar_mix", "concat", "dwatt"),
        n_shots=(32,),
        epochs=(25,),
        trials=1,
        backbones=(backbone,),
        dev_sentences=1000,
        learning_rates=RATES,
        probe_layers="all",
    )
    for name, vectorize in EXECUTIONS.items():
        run_sweep(
            specs,
            output / f"minilm.{name.replace(' ', '-')}.jsonl",
            output_root=output / "runs" / name,
            engine="stacked",
            execution=ExecutionOf(alone=run, together=partial(run_together, vectorize=vectorize)),
            evaluate_test=True,
        )


def rows_by_id(paths) -> dict[str, dict]:
    rows = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows[row["run_id"]] = row
    return rows


def compared(first: dict, second: dict) -> dict:
    """What differs between two executions of one run."""

    def test(row):
        scores = row.get("test_scores") or {}
        return 100 * scores.get("f1", scores.get("accuracy", float("nan")))

    curves = [
        {point["epoch"]: point.get("f1", point.get("accuracy")) for point in row.get("dev_curve", [])}
        for row in (first, second)
    ]
    shared = sorted(curves[0].keys() & curves[1].keys())
    dev_gap = max((abs(curves[0][e] - curves[1][e]) * 100 for e in shared), default=float("nan"))
    first_differing = next((e for e in shared if abs(curves[0][e] - curves[1][e]) > 1e-12), None)
    return {
        "run_id": first["run_id"],
        "learning_rate": first["config"]["learning_rate"],
        "fusion": first["config"]["fusion"],
        "test_difference": test(second) - test(first),
        "epoch_changed": first.get("best_epoch") != second.get("best_epoch"),
        "largest_dev_difference": dev_gap,
        "first_epoch_differing": first_differing,
    }


def pairs(first: dict[str, dict], second: dict[str, dict]) -> list[dict]:
    return [compared(first[run_id], second[run_id]) for run_id in sorted(first.keys() & second.keys())]


def committed_pairs() -> dict[str, list[dict]]:
    found = {}
    for folder in ("fair-cpu", "fair-few-shot-dev"):
        superseded = sorted(glob.glob(str(REPO / "docs" / "results" / folder / "superseded" / "*.jsonl")))
        if superseded:
            current = sorted(glob.glob(str(REPO / "docs" / "results" / folder / "*.jsonl")))
            found[f"{folder}: replaced rows (another code version; some on an H100)"] = pairs(
                rows_by_id(superseded), rows_by_id(current)
            )
    agnews = REPO / "docs" / "results" / "fair-agnews"
    gpu = {
        run_id: row
        for run_id, row in rows_by_id(sorted(agnews.glob("fair.SmolLM2-135M-Instruct-q4.shard-*.jsonl"))).items()
        if (row.get("environment") or {}).get("device", "").startswith("cuda") and row["config"]["fusion"] == "base"
    }
    cpu = rows_by_id([agnews / "fair.SmolLM2-135M-Instruct-q4.probe-ensembles.jsonl"])
    found["fair-agnews: SmolLM2's probe on an H100 and on this CPU"] = pairs(gpu, cpu)
    return found


def summary(rows: list[dict]) -> dict:
    if not rows:
        return {}
    gaps = sorted(abs(row["test_difference"]) for row in rows)
    quantile = lambda q: gaps[min(len(gaps) - 1, int(q * len(gaps)))]
    by_rate = {}
    for row in rows:
        by_rate.setdefault(row["learning_rate"], []).append(abs(row["test_difference"]))
    same_epoch = [abs(r["test_difference"]) for r in rows if not r["epoch_changed"]]
    moved = [abs(r["test_difference"]) for r in rows if r["epoch_changed"]]
    return {
        "runs": len(rows),
        "identical": sum(gap == 0 for gap in gaps),
        "median": statistics.median(gaps),
        "q90": quantile(0.9),
        "max": gaps[-1],
        "epoch_changed": sum(r["epoch_changed"] for r in rows),
        "median_same_epoch": statistics.median(same_epoch) if same_epoch else None,
        "median_epoch_changed": statistics.median(moved) if moved else None,
        "median_by_rate": {f"{rate:g}": statistics.median(values) for rate, values in sorted(by_rate.items())},
    }


def effects() -> dict:
    """The fair comparison's effects: the absolute mean paired difference from the best single layer of every
    fusion-setting and ensemble-setting pair of the CoNLL-03 table as it stands (fair-cpu): the last layer and the
    floor (no backbone, the majority label) left out, which are no fusion."""
    import pandas as pd

    from dwatt.experiment.methods import FLOOR_METHODS

    table = pd.read_csv(REPO / "docs" / "results" / "fair-cpu" / "report" / "tables" / "fair_comparison.csv")
    others = ["best single layer", "last layer", *FLOOR_METHODS.values()]
    values = sorted(table[~table.method.isin(others)].minus_best_layer.abs().dropna())
    return {"pairs": len(values), "median": statistics.median(values), "q90": values[int(0.9 * len(values))]}


def markdown(result: dict) -> str:
    lines = [
        "# Rerun noise: the same runs made twice",
        "",
        "|pair of executions | runs | identical | median \\|Δ test\\| | 90% | max | chosen epoch changed | median \\|Δ\\|, same epoch | median \\|Δ\\|, epoch changed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, found in result["pairs"].items():
        s = found["summary"]
        if not s:
            continue
        fmt = lambda v: "—" if v is None else f"{v:.2f}"
        lines.append(
            f"| {name} | {s['runs']} | {s['identical']} | {s['median']:.2f} | {s['q90']:.2f} | {s['max']:.2f} | "
            f"{s['epoch_changed']} ({100 * s['epoch_changed'] / s['runs']:.0f}%) | {fmt(s['median_same_epoch'])} | "
            f"{fmt(s['median_epoch_changed'])} |"
        )
    lines += [
        "",
        "Median |Δ test| (test F1 or accuracy points) by learning rate:",
        "",
        "| pair of executions | " + " | ".join(f"{rate:g}" for rate in RATES) + " |",
        "|---|" + "---|" * len(RATES),
    ]
    for name, found in result["pairs"].items():
        by_rate = found["summary"].get("median_by_rate", {})
        if by_rate:
            lines.append(
                f"| {name} | "
                + " | ".join(f"{by_rate[f'{r:g}']:.2f}" if f"{r:g}" in by_rate else "" for r in RATES)
                + " |"
            )
    e = effects()  # the table's today, never the one the noise was measured beside
    lines += [
        "",
        "The same-machine pairs' stores are beside this file (`minilm.*.jsonl`), trained by "
        "`python benchmarks/rerun_noise.py --train`; the others are the committed stores' rows.",
    ]
    lines += [
        "",
        f"The effects they are set against (fair-cpu, CoNLL-03): the |mean paired difference| from the best "
        f"single layer of the {e['pairs']} fusion and ensemble pairs has median {e['median']:.2f} and 90% quantile "
        f"{e['q90']:.2f} F1.",
        "",
        f"`{result['command']}`",
        "",
    ]
    return "\n".join(lines)


def readme_text(result: dict) -> str:
    """One sentence for the README: the rerun noise beside the effects."""
    pairs = result["pairs"]
    same = pairs.get("this CPU, this code: the same runs twice", {}).get("summary") or {}
    stacked = pairs.get("this CPU, this code: stacked under vmap, then one after another", {}).get("summary") or {}
    other = [found["summary"] for name, found in pairs.items() if not name.startswith("this CPU") and found["summary"]]
    parts = []
    if same:
        parts.append(
            f"the same runs made twice on one CPU with one code version gave {same['identical']} of "
            f"{same['runs']} identical results"
            + (
                f" (stacked under vmap or one after another, {stacked['identical']} of "
                f"{stacked['runs']}, the rest within {stacked['max']:.2f})"
                if stacked
                else ""
            )
        )
    if other:
        gaps = [s["median"] for s in other]
        moved = sum(s["epoch_changed"] for s in other) / sum(s["runs"] for s in other)
        parts.append(
            f"made again by another code version or on a GPU, they differ by a median {min(gaps):.2f} to "
            f"{max(gaps):.2f} test points (90%: up to {max(s['q90'] for s in other):.2f}; the epoch chosen on dev "
            f"moved in {100 * moved:.0f}% of them)"
        )
    found_effects = effects()  # the table's today, never the one the noise was measured beside
    return (
        "Rerun noise, measured ([rerun noise](docs/results/rerun-noise/rerun_noise.md)): "
        + "; ".join(parts)
        + f", the order of the fusions' differences from the best single layer (median {found_effects['median']:.2f} F1): "
        "an unmarked difference may be no more than that.\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", action="store_true", help="train the same-machine pairs first")
    parser.add_argument("--backbone", default="models/all-MiniLM-L6-v2")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=str(OUTPUT))
    args = parser.parse_args(argv)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    if args.train:
        train(args.backbone, output, args.threads)
    found = committed_pairs()
    stores = {name: output / f"minilm.{name.replace(' ', '-')}.jsonl" for name in EXECUTIONS}
    if all(path.is_file() for path in stores.values()):
        first, again, sequential = (rows_by_id([path]) for path in stores.values())
        found["this CPU, this code: the same runs twice"] = pairs(first, again)
        found["this CPU, this code: stacked under vmap, then one after another"] = pairs(first, sequential)
    from dwatt.portable import portable_command

    result = {
        "command": " ".join(
            ["python benchmarks/rerun_noise.py", *portable_command(sys.argv[1:] if argv is None else argv)]
        ),
        "pairs": {name: {"summary": summary(rows), "rows": rows} for name, rows in found.items()},
        "effects": effects(),
    }
    (output / "rerun_noise.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    (output / "rerun_noise.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
