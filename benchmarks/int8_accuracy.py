"""What int8 inference costs in accuracy: a trained checkpoint scored in fp32 and int8, in PyTorch and in onnxruntime.

For each task, a checkpoint trained the documented way (`dwatt train`, FE, DWAtt; trained here first if its folder
is missing) is scored by `dwatt evaluate` four ways: PyTorch fp32, PyTorch `--quantize int8` (dynamic int8 linear maps
in the backbone and fusion), and its `dwatt export --quantize int8` folder in onnxruntime, fp32 and int8. NER: the
CoNLL-03 test split, micro-F1 (seqeval). Text classification: the vendored AG News evaluation split (it has no test
split; the run chose its epoch on it, which does not favour any of the four ways), accuracy and macro-F1.

    python benchmarks/int8_accuracy.py                                  # MiniLM: NER at N = 128, AG News at N = 64
    python benchmarks/int8_accuracy.py --backbone models/all-mpnet-base-v2 --tasks ner

Writes `results/int8_accuracy_cpu.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
from pathlib import Path

import results_files

from dwatt.cli import main as dwatt

HERE = Path(__file__).resolve().parent
TASKS = {"ner": ["--n-shot", "128"], "cls": ["--task", "cls", "--n-shot", "64"]}
WAYS = {  # name: (evaluate arguments, on the export folder?)
    "PyTorch fp32": ([], False),
    "PyTorch int8": (["--quantize", "int8"], False),
    "onnxruntime fp32": ([], True),
    "onnxruntime int8": (["--quantize", "int8"], True),
}


def run(argv: list[str]) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = dwatt(argv)
    if code != 0:
        raise SystemExit(f"dwatt {' '.join(argv)} exited {code}")
    return printed.getvalue()


def write_results(rows: list[dict], output: str | Path, replacing: str) -> None:
    """The rows beside the committed rows of other backbones (`replacing`'s earlier rows give way), as JSON and
    Markdown."""
    earlier = Path(output) / "int8_accuracy_cpu.json"
    kept = (
        [r for r in json.loads(earlier.read_text())["rows"] if r["backbone"] != replacing] if earlier.exists() else []
    )
    rows = kept + rows
    result = {
        "rows": rows,
        "environment": results_files.environment(),
        "commands": sorted({r.get("command", "python benchmarks/int8_accuracy.py") for r in rows}),
    }
    lines = [
        f"# int8 against fp32: scores of trained checkpoints ({result['environment']['device_name']})\n",
        f"Commands: {', '.join(f'`{c}`' for c in result['commands'])}. NER: CoNLL-03 test split, micro-F1; text "
        "classification: AG News evaluation split, accuracy. Seconds: the whole `dwatt evaluate` call in process "
        "(model load included).\n",
        "| backbone | task | trained at N | way | score | change, points | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['backbone']} | {r['task']} | {r['n_shot']} | {r['way']} | {r['score']} {100 * r['value']:.2f} | "
        f"{r['change_points']:+.2f} | {r['seconds']:.0f} |"
        for r in rows
    ]
    results_files.write(output, "int8_accuracy_cpu", result, "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default=None, help="default: MiniLM from the PyPI package")
    parser.add_argument("--tasks", default="ner,cls")
    parser.add_argument("--work", default="runs/bench-int8")
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    work = Path(args.work)
    backbone = ["--backbone", args.backbone] if args.backbone else []
    name = Path(args.backbone).name if args.backbone else "all-MiniLM-L6-v2"
    rows = []
    for task in args.tasks.split(","):
        run_dir = work / f"{name}-{task}"
        if not (run_dir / "model").is_dir():
            run(["train", *backbone, *TASKS[task], "--output-dir", str(run_dir), "--quiet"])
        trained = json.loads((run_dir / "results.json").read_text())
        run(["export", str(run_dir / "model"), str(run_dir / "onnx"), "--quantize", "int8"])
        split = ["--split", "test"] if task == "ner" else ["--split", "validation"]
        for way, (options, exported) in WAYS.items():
            started = time.perf_counter()
            scores = json.loads(run(["evaluate", str(run_dir / ("onnx" if exported else "model")), *split, *options]))
            seconds = time.perf_counter() - started
            key = "f1" if task == "ner" else "accuracy"
            rows.append(
                {
                    "backbone": name,
                    "task": task,
                    "way": way,
                    "split": split[1],
                    "score": key,
                    "value": scores[key],
                    "macro_f1": scores.get("macro_f1"),
                    "seconds": round(seconds, 1),
                    "n_shot": trained["config"]["n_shot"],
                    "fusion": trained["config"]["fusion"],
                }
            )
            print(f"{name} {task} {way}: {key} {100 * scores[key]:.2f} ({seconds:.0f} s)", flush=True)
    for row in rows:
        fp32 = next(r for r in rows if r["task"] == row["task"] and r["way"] == "PyTorch fp32")
        row["change_points"] = round(100 * (row["value"] - fp32["value"]), 2)
        row["command"] = results_files.command("int8_accuracy.py", argv)
    write_results(rows, args.output, replacing=name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
