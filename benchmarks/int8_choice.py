"""The int8 scheme `dwatt export --quantize int8` keeps on this CPU, and what its choice gives `dwatt predict`.

`dwatt export --quantize int8` tries the schemes that may keep the backbone family's answers, measures each on the
calibration sample (how often it gives the fp32 graph's answer, and its time against the fp32 graph's on this
machine) and keeps the fastest of those at 98% or above (`dwatt.serving.export.check_int8`). This runs that export on
each `--head NAME=CHECKPOINT` (a tagger) and records every candidate's figures from its `dwatt_export.json`, then times
`dwatt predict`'s tagging of the first `--sentences` CoNLL-03 test sentences with the export's fp32 graph and with the
int8 graph it kept (`--rounds` interleaved rounds, the fp32 graph timed twice a round: the noise control), and counts
the words the int8 graph tags as the fp32 graph does. One row per head and CPU: a run on another machine adds its
rows beside the others' (the choice is the CPU's).

    python benchmarks/int8_choice.py --head SmolLM2-135M-Instruct-q4=runs/int8/smollm2-l11/model \
        --sentences 300 --rounds 3 --threads 1

Writes `results/int8_choice.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import results_files

HERE = Path(__file__).resolve().parent
FP32, INT8 = "fp32", "int8"
# what the table keeps of each candidate the export records (`smooth` says how many of its products it left fp32)
CANDIDATE_KEYS = ("scheme", "agreement", "time_vs_fp32", "fp32_products", "products")


def cpu_name(cpu: dict) -> str:
    """The export's record of the CPU (`dwatt.serving.export.cpu_capabilities`) as the table names it."""
    return f"{cpu['model']} ({', '.join(cpu['flags']) or 'no int8 extensions listed'})"


def measure(name: str, checkpoint: str, sentences: int, rounds: int, work: Path) -> dict:
    from dwatt.data import load_conll2003
    from dwatt.serving.export import export_onnx
    from dwatt.serving.int8_graphs import answers
    from dwatt.serving.onnx_runtime import load_export

    folder = work / "export"
    config = export_onnx(checkpoint, folder, quantize="int8")
    record = config["int8"]
    test = [words for words in load_conll2003()["test"]["tokens"] if words][:sentences]
    models = {FP32: load_export(folder), INT8: load_export(folder, "int8")}
    tags = {way: answers(task, model, tokenizer, test) for way, (model, tokenizer, task) in models.items()}
    timings = results_files.interleaved_timings(
        {
            way: (lambda model=model, tokenizer=tokenizer, task=task: answers(task, model, tokenizer, test))
            for way, (model, tokenizer, task) in models.items()
        },
        rounds,
        FP32,
    )
    words = sum(map(len, tags[FP32]))
    same = sum(a == b for mine, theirs in zip(tags[FP32], tags[INT8]) for a, b in zip(mine, theirs))
    return {
        "head": name,
        "cpu": cpu_name(record["cpu"]),
        "kept": record["scheme"],
        "calibration": record["calibration"],
        "threshold": record["threshold"],
        "candidates": [
            {key: candidate[key] for key in CANDIDATE_KEYS if key in candidate} for candidate in record["candidates"]
        ],
        "test_sentences": len(test),
        "test_words": words,
        "test_words_as_fp32": same / words,
        "predict_time_vs_fp32": timings["median"][INT8] / timings["median"][FP32],
        "noise_control": timings["noise_control"],
        "rounds": rounds,
    }


def table(result: dict) -> str:
    """One row per head and CPU: each candidate on the calibration sample, the scheme kept, and `dwatt predict` with
    it on the test sentences (the serving guide quotes it)."""
    lines = [
        "| head | CPU | candidates on the calibration sample (answers as fp32, time vs fp32) | kept | `dwatt predict` on "
        "test sentences: words as fp32 | time vs fp32 (noise control) |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        tried = "; ".join(
            f"`int8-{c['scheme']}` {100 * c['agreement']:.1f}%, {c['time_vs_fp32']:.2f}x"
            + (f" ({c['fp32_products']} of {c['products']} products fp32)" if "products" in c else "")
            for c in row["candidates"]
        )
        lines.append(
            f"| {row['head']} | {row['cpu']} | {tried} | `int8-{row['kept']}` | {100 * row['test_words_as_fp32']:.2f}% "
            f"of {row['test_words']} | {row['predict_time_vs_fp32']:.2f}x ({row['noise_control']:.2f}) |"
        )
    return "\n".join(lines) + "\n"


def markdown(result: dict) -> str:
    return "\n".join(
        [
            "# The int8 scheme `dwatt export --quantize int8` keeps, per CPU\n",
            "Each head exported with `--quantize int8`: every candidate the export tried, measured on its calibration "
            "sample (the first 128 CoNLL-03 dev sentences), the scheme it kept (the fastest at 98% of words or above), "
            "then `dwatt predict` with the kept int8 graph against the fp32 graph on the first CoNLL-03 test sentences "
            "(median of interleaved rounds; noise control: the fp32 graph timed twice a round, 1.00 on a quiet machine). "
            "Generated by `benchmarks/int8_choice.py`.\n",
            table(result),
            results_files.commands_line(result["commands"]),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head", action="append", required=True, help="NAME=CHECKPOINT (repeat)")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    path = Path(args.output) / "int8_choice.json"
    result = (
        json.loads(path.read_text()) if path.exists() else {"benchmark": "int8_choice", "rows": [], "commands": []}
    )
    heads = dict(item.split("=", 1) for item in args.head)
    for name, checkpoint in heads.items():
        with tempfile.TemporaryDirectory() as work:
            row = measure(name, checkpoint, args.sentences, args.rounds, Path(work))
        result["rows"] = [r for r in result["rows"] if (r["head"], r["cpu"]) != (row["head"], row["cpu"])] + [row]
    result["commands"] = sorted(set(result["commands"]) | {results_files.command_with_heads("int8_choice.py", argv)})
    result["environment"] = results_files.environment()
    results_files.write(args.output, "int8_choice", result, markdown(result))


if __name__ == "__main__":
    main()
