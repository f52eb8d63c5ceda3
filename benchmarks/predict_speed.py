"""Bulk prediction speed: `dwatt predict --file` (batched and length-sorted, against one row at a time as it ran before)
and the in-process model in sorted batches, against transformers' pipeline on the same backbone with a plain head.

Per backbone (MiniLM, MPNet) and input (CoNLL-03 test sentences, tagged; AG News texts, classified), one round times,
in an order rotated from round to round:

- `dwatt predict CKPT --file F` as a whole command (process start, model load, prediction, output), the default
  batch size, and `--batch-size 1` (one window or text at a time: the path `dwatt predict` took before batching);
- the same command with `--quantize int8` (PyTorch's dynamic int8), and on the checkpoint's `dwatt export --quantize
  int8` folder, fp32 and int8 (onnxruntime, which an export folder runs in without importing torch);
- the same DWAtt model in process, `dwatt.serving.prediction` over all inputs in sorted batches;
- `transformers.pipeline` ("token-classification" / "text-classification") with `AutoModelFor...` on the same
  backbone (a plain linear head), batch 1 and batch 32, the model loaded beforehand;
- the pipeline at batch 32 a second time, as if it were another model: its ratio is the measurement's own noise.

Each ratio is the median over rounds of a measurement's time over the pipeline's batch-32 time in the same round. The
DWAtt heads are random (speed does not depend on their values). The batched command's outputs are asserted equal to
the one-at-a-time command's (tags and labels exactly, probabilities to 1e-4), and so are onnxruntime's fp32 outputs;
the int8 outputs' agreement with fp32 is recorded (on random heads; `int8_accuracy.py` scores trained ones). A sweep of
batch sizes for the default:
`--batch-sizes 8,16,32,64,128` (in process).

    python benchmarks/predict_speed.py --backbones sentence-transformers/all-MiniLM-L6-v2,models/all-mpnet-base-v2 \
        --rounds 3,1 --batch-sizes 8,16,32,64,128

(MPNet's round takes about 25 minutes on the 2-core CPU: one round there.)

Writes `results/predict_speed_cpu.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import results_files
import torch
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, pipeline

from dwatt import DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.data import load_conll2003, load_tokenizer
from dwatt.data.classification import load_classification_dataset
from dwatt.portable import backbone_folder, portable_path
from dwatt.serving.prediction import BATCH_SIZE, classify, predict_tags

HERE = Path(__file__).resolve().parent
TASKS = {"conll": "token-classification", "agnews": "text-classification"}
CONTROL = "pipeline batch 32 again"
INT8 = "dwatt predict --file --quantize int8"
ONNX = "dwatt predict EXPORT --file (onnxruntime)"
ONNX_INT8 = "dwatt predict EXPORT --file --quantize int8 (onnxruntime)"
BASELINE = "pipeline batch 32"


def inputs(count: int) -> dict[str, list[str]]:
    """The first `count` CoNLL-03 test sentences (words joined by spaces) and AG News evaluation texts (title and
    description as one text), from the vendored copies."""
    conll = load_conll2003()["test"].filter(lambda row: len(row["tokens"]) > 0)
    news = load_classification_dataset("ag_news")["validation"]
    return {
        "conll": [" ".join(tokens) for tokens in conll["tokens"][:count]],
        "agnews": [f"{title} {text}" for title, text in zip(news["text"][:count], news["text_pair"][:count])],
    }


def checkpoints(backbone: str, folder: Path) -> dict[str, Path]:
    """A DWAtt tagger and classifier (random heads) on `backbone`, saved head-only with the tokenizer, as `dwatt
    train` saves them."""
    made = {}
    for task, (cls, labels) in (
        ("conll", (DWAttForTokenClassification, 9)),
        ("agnews", (DWAttForSequenceClassification, 4)),
    ):
        torch.manual_seed(0)
        model = cls.from_backbone(backbone, fusion="dwatt", num_labels=labels)
        model.save_pretrained(folder / task, heads_only=True)
        load_tokenizer(backbone).save_pretrained(folder / task)
        made[task] = folder / task
    return made


def command(checkpoint: Path, source: Path, output: Path, batch_size: int, options: tuple[str, ...] = ()) -> float:
    """Seconds of one whole `dwatt predict` command (with `options`: `--quantize int8`), its JSONL output into
    `output`."""
    started = time.perf_counter()
    with open(output, "w") as out:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "dwatt.cli",
                "predict",
                str(checkpoint),
                "--jsonl",
                str(source),
                "--batch-size",
                str(batch_size),
                "--quiet",
                *options,
            ],
            stdout=out,
            check=True,
            env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error"),
        )
    return time.perf_counter() - started


def agreement(task: str, path: Path, reference: Path) -> float:
    """The share of lines whose tags (or label) equal the reference command's."""
    rows = [[json.loads(line) for line in p.read_text().splitlines()] for p in (path, reference)]
    key = "tags" if task == "conll" else "label"
    return sum(a[key] == b[key] for a, b in zip(*rows)) / len(rows[1])


def export(checkpoint: Path, folder: Path) -> None:
    """`dwatt export CHECKPOINT FOLDER --quantize int8`: the fp32 and int8 ONNX graphs."""
    subprocess.run(
        [sys.executable, "-m", "dwatt.cli", "export", str(checkpoint), str(folder), "--quantize", "int8"],
        check=True,
        capture_output=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )


def same_outputs(task: str, batched: Path, alone: Path) -> dict:
    """The batched command's outputs against the one-at-a-time command's: asserted equal."""
    rows = [[json.loads(line) for line in path.read_text().splitlines()] for path in (batched, alone)]
    assert len(rows[0]) == len(rows[1]) > 0
    if task == "conll":
        differing = sum(a["tags"] != b["tags"] for a, b in zip(*rows))
        assert differing == 0, f"{differing} sentences tagged differently in batches"
        return {"sentences": len(rows[0]), "differing": 0}
    labels = sum(a["label"] != b["label"] for a, b in zip(*rows))
    largest = max(abs(a["scores"][k] - b["scores"][k]) for a, b in zip(*rows) for k in a["scores"])
    assert labels == 0 and largest <= 1e-4, (labels, largest)
    return {"texts": len(rows[0]), "differing_labels": 0, "largest_probability_difference": largest}


def measure(backbone: str, texts: dict[str, list[str]], work: Path, rounds: int, batch_size: int) -> tuple[list, list]:
    name, folder = portable_path(backbone), backbone_folder(backbone)
    saved = checkpoints(folder, work / "checkpoints")
    tokenizer = load_tokenizer(folder)
    rows, checks = [], []
    for task, pipe_task in TASKS.items():
        source = work / f"{task}.txt"
        source.write_text("\n".join(texts[task]) + "\n")
        dwatt_model = (
            (DWAttForTokenClassification if task == "conll" else DWAttForSequenceClassification)
            .from_pretrained(saved[task])
            .eval()
        )
        plain_class = AutoModelForTokenClassification if task == "conll" else AutoModelForSequenceClassification
        torch.manual_seed(0)
        plain = pipeline(
            pipe_task,
            model=plain_class.from_pretrained(folder, num_labels=9 if task == "conll" else 4),
            tokenizer=tokenizer,
            device="cpu",
        )
        words = [text.split() for text in texts[task]]

        def in_process():
            if task == "conll":
                predict_tags(dwatt_model, tokenizer, words, batch_size)
            else:
                classify(dwatt_model, tokenizer, texts[task], batch_size)

        export(saved[task], work / "exports" / task)
        exported = work / "exports" / task
        steps = {
            "dwatt predict --file (batched, sorted)": lambda: command(
                saved[task], source, work / "batched.jsonl", batch_size
            ),
            INT8: lambda: command(saved[task], source, work / "int8.jsonl", batch_size, ("--quantize", "int8")),
            ONNX: lambda: command(exported, source, work / "onnx.jsonl", batch_size),
            ONNX_INT8: lambda: command(exported, source, work / "onnx-int8.jsonl", batch_size, ("--quantize", "int8")),
            "dwatt predict --file (one at a time)": lambda: command(saved[task], source, work / "alone.jsonl", 1),
            "DWAtt model in process, sorted batches": lambda: timed(in_process),
            "pipeline batch 1": lambda: timed(lambda: plain(texts[task], batch_size=1)),
            BASELINE: lambda: timed(lambda: plain(texts[task], batch_size=32)),
            CONTROL: lambda: timed(lambda: plain(texts[task], batch_size=32)),
        }
        times = {label: [] for label in steps}
        with torch.inference_mode():
            timed(lambda: plain(texts[task][:64], batch_size=32))  # warm-up
            in_process()
            for round_index, label in results_files.rotated_rounds(steps, rounds):
                times[label].append(steps[label]())
                print(f"  {name} {task} round {round_index}: {label} {times[label][-1]:.1f} s", file=sys.stderr)
        checks.append(
            {"backbone": name, "input": task}
            | same_outputs(task, work / "batched.jsonl", work / "alone.jsonl")
            | {
                "onnx_runtime": same_outputs(task, work / "onnx.jsonl", work / "batched.jsonl"),
                "int8_agreement": agreement(task, work / "int8.jsonl", work / "batched.jsonl"),
                "onnx_int8_agreement": agreement(task, work / "onnx-int8.jsonl", work / "batched.jsonl"),
            }
        )
        for label, values in times.items():
            rows.append(
                {
                    "backbone": name,
                    "input": task,
                    "items": len(texts[task]),
                    "measure": label,
                    "seconds": round(statistics.median(values), 3),
                    "ratio_to_pipeline_32": round(
                        statistics.median(v / b for v, b in zip(values, times[BASELINE])), 4
                    ),
                }
            )
    return rows, checks


def timed(step) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def batch_size_sweep(backbone: str, texts: list[str], sizes: list[int], work: Path) -> list[dict]:
    """In-process tagging time of the DWAtt model by batch size (what the default was chosen from)."""
    folder = backbone_folder(backbone)
    saved = checkpoints(folder, work / "sweep")
    model = DWAttForTokenClassification.from_pretrained(saved["conll"]).eval()
    tokenizer = load_tokenizer(folder)
    words = [text.split() for text in texts]
    predict_tags(model, tokenizer, words[:64], 32)
    times = {size: [] for size in sizes}
    for _, size in results_files.rotated_rounds(sizes, 3):
        times[size].append(timed(lambda: predict_tags(model, tokenizer, words, size)))
    return [
        {"backbone": portable_path(backbone), "batch_size": size, "seconds": round(statistics.median(t), 3)}
        for size, t in times.items()
    ]


def table(rows: list[dict]) -> str:
    """The results at a glance (the README quotes it): seconds and the ratio to the pipeline at batch 32."""
    lines = ["| backbone | input | measure | seconds | x pipeline batch 32 |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row['backbone'].split('/')[-1]} | {row['items']} {'CoNLL-03 test sentences' if row['input'] == 'conll' else 'AG News texts'} "
            f"| {row['measure']} | {row['seconds']:.1f} | {row['ratio_to_pipeline_32']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def readme_text(result: dict) -> str:
    """What the README says of the committed measurement, per backbone and input (tests/test_readme.py checks it)."""
    sentences = []
    for backbone, task in dict.fromkeys((row["backbone"], row["input"]) for row in result["rows"]):
        ratio = {
            row["measure"]: row["ratio_to_pipeline_32"]
            for row in result["rows"]
            if (row["backbone"], row["input"]) == (backbone, task)
        }
        what = "CoNLL-03 sentences" if task == "conll" else "AG News texts"
        parts = [f"the fp32 command {ratio['dwatt predict --file (batched, sorted)']:.2f}×"]
        parts += [f"`--quantize int8` {ratio[INT8]:.2f}×"] if INT8 in ratio else []
        parts += (
            [f"the ONNX export in onnxruntime {ratio[ONNX]:.2f}× (fp32) and {ratio[ONNX_INT8]:.2f}× (int8)"]
            if ONNX in ratio
            else []
        )
        parts += [
            f"the model in process {ratio['DWAtt model in process, sorted batches']:.2f}×",
            f"the pipeline's second run (the noise control) {ratio[CONTROL]:.2f}×",
        ]
        sentences.append(f"{backbone.split('/')[-1]}, {result['settings']['items']} {what}: " + ", ".join(parts) + ".")
    return "\n".join(sentences) + "\n"


def main(argv: list[str] | None = None) -> int:
    from dwatt.defaults import DEFAULT_BACKBONE_HUB_ID

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbones", default=DEFAULT_BACKBONE_HUB_ID, help="comma-separated Hub ids or folders")
    parser.add_argument("--items", type=int, default=2000, help="sentences and texts per input")
    parser.add_argument("--rounds", default="3", help="rounds per backbone, comma-separated (the last repeats)")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument(
        "--batch-sizes", default=None, help="also time in-process tagging at these batch sizes (MiniLM)"
    )
    parser.add_argument("--work", default="runs/bench-predict")
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    texts = inputs(args.items)
    rows, checks = [], []
    backbones, rounds = args.backbones.split(","), [int(r) for r in args.rounds.split(",")]
    rounds += rounds[-1:] * (len(backbones) - len(rounds))
    for backbone, backbone_rounds in zip(backbones, rounds):
        got, checked = measure(backbone, texts, work, backbone_rounds, args.batch_size)
        rows += got
        checks += checked
    sweep = (
        batch_size_sweep(backbones[0], texts["conll"], [int(s) for s in args.batch_sizes.split(",")], work)
        if args.batch_sizes
        else []
    )
    result = {
        "settings": {
            "rounds": dict(zip(map(portable_path, backbones), rounds)),
            "batch_size": args.batch_size,
            "items": args.items,
            "threads": torch.get_num_threads(),
        },
        "rows": rows,
        "equality": checks,
        "batch_size_sweep": sweep,
        "environment": results_files.environment(torch.device("cpu")),
        "command": results_files.command("predict_speed.py", argv),
    }
    counts = ", ".join(f"{count} on {name.split('/')[-1]}" for name, count in result["settings"]["rounds"].items())
    lines = [
        f"# Bulk prediction speed on the CPU ({result['environment']['device_name']})\n",
        f"Median of interleaved rounds ({counts}), the order rotated from round to round; each ratio is the median "
        "over rounds of a measurement's time over the pipeline's at batch 32 in the same round (its second run is "
        "the noise control). `dwatt predict` times the whole command: process start, model load, prediction, "
        f"output. Batched outputs equal the one-at-a-time ones (asserted). Command: `{result['command']}`\n",
        table(rows),
    ]
    if sweep:
        lines += ["## In-process tagging by batch size\n", "| backbone | batch size | seconds |", "|---|---|---|"]
        lines += [
            f"| {row['backbone'].split('/')[-1]} | {row['batch_size']} | {row['seconds']:.2f} |" for row in sweep
        ]
    results_files.write(args.output, "predict_speed_cpu", result, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
