"""int8 that keeps a tagger's tags: the known remedies for LLM activations' outliers, measured on the same heads.

Each head (a `dwatt train` checkpoint: `NAME=FOLDER`) is exported to ONNX in fp32 (`dwatt.serving.export`), then
made int8 in each of these ways, all calibrated (where they calibrate) on the export's default sample, the first 128
sentences of CoNLL-03's dev split (`dwatt.serving.int8_graphs.calibration_sample`):
- `dynamic`: onnxruntime's dynamic int8, activations one scale per tensor per batch (`dwatt export --quantize
  int8-dynamic`; the encoders' `int8`);
- `static QDQ`: onnxruntime's `quantize_static`, activations' scales fixed on the calibration sample (MinMax),
  weights per channel, QDQ format;
- `mixed`: `dynamic`, with the products whose inputs lose most to one scale per tensor (relative error over 8% on a
  calibration batch) left fp32;
- `per token`: activations one scale per token, computed as the graph runs (`quantize_smooth_graph` without
  smoothing);
- `smooth alone`: `per token` after SmoothQuant's migration (alpha 0.5) of the inputs' channel ranges into the
  weights;
- `smooth`: that, with the products whose smoothed inputs lose over 5% per token on a calibration batch left fp32
  (`dwatt export --quantize int8-smooth`);
- `weights int8` / `weights int4`: weight-only (onnxruntime's `MatMulNBits`, blocks of 128, symmetric) with int8
  arithmetic (`accuracy_level` 4: activations quantized per block of a token's row; `dwatt export --quantize
  int8-weights`, the decoders' `int8`);
- and in PyTorch: the checkpoint in fp32, with `dwatt predict --quantize int8` (dynamic, one scale per tensor), and
  with the backbone in bfloat16 (on a CPU with AVX-512 BF16 or AMX).
In every way the task head stays fp32. Each is run on the first `--sentences` CoNLL-03 test sentences: the share of
words and of sentences tagged as the fp32 graph tags them, the test F1 (seqeval) and its change from fp32, the time
of `dwatt predict`'s tagging (batches of 32, length-sorted) against the fp32 graph's (interleaved rounds, the fp32
graph timed twice a round: the noise control), and the graph's size on disk. The CPU's int8 and bf16 instructions
(from /proc/cpuinfo) are named with the results, since the speed of every way depends on them.

    python benchmarks/int8_decoders.py --head SmolLM2-135M-Instruct-q4=runs/smol-l11/model \
      --head all-MiniLM-L6-v2=runs/minilm/model --sentences 300 --rounds 3

Writes `results/int8_decoders_cpu.json` and `.md` next to this file (or into --output); heads not named keep their
earlier rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import results_files
import torch

from dwatt.checkpoints import load_checkpoint
from dwatt.data import load_conll2003
from dwatt.serving.export import export_onnx
from dwatt.serving.int8_graphs import (
    answers,
    calibrated_smooth_graph,
    calibration_sample,
    input_ranges,
    quantize_dynamic_graph,
    quantize_smooth_graph,
    quantize_weights_graph,
    quantized_products,
    run_recording,
    smoothing_scales,
)
from dwatt.serving.onnx_runtime import OnnxModel, load_export
from dwatt.serving.quantization import quantize_int8

HERE = Path(__file__).resolve().parent
FP32 = "fp32 graph"
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")
MIXED_ERROR = 0.08


def cpu_capabilities() -> dict:
    """The CPU's model and which of its int8 and bf16 instructions it has."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    model = next(
        (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "unknown"
    )
    return {"model": model, **{flag: flag in flags for flag in CPU_FLAGS}}


def per_tensor_errors(source: Path, fp32: OnnxModel, answer) -> dict[str, float]:
    """Each quantized product's input: the largest relative error, over the calibration batches, of 8 bits with one
    scale per tensor (asymmetric, as onnxruntime's dynamic quantization)."""
    import onnx

    errors: dict[str, float] = {}

    def record(name: str, values: np.ndarray) -> None:
        low, high = min(values.min(), 0.0), max(values.max(), 0.0)
        step = (high - low) / 255 or 1.0
        zero = np.round(-low / step)
        restored = (np.clip(np.round(values / step) + zero, 0, 255) - zero) * step
        error = float(np.linalg.norm(restored - values) / max(np.linalg.norm(values), 1e-30))
        errors[name] = max(errors.get(name, 0.0), error)

    run_recording(source, fp32, answer, record)
    nodes = quantized_products(onnx.load(str(source), load_external_data=False).graph)
    return {node.name: errors[node.input[0]] for node in nodes}


def static_qdq(source: Path, target: Path, tokenizer, sample: list, inputs: list[str]) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from dwatt.serving.prediction import length_sorted_batches, pad_id, padded
    from dwatt.tokenization import encode_words

    rows, _ = encode_words(tokenizer, sample, min(tokenizer.model_max_length, 512), 32)
    batches = [
        padded(rows, indices, pad_id(tokenizer))
        for indices in length_sorted_batches([len(r) for r in rows["input_ids"]], 32)
    ]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(batches)

        def get_next(self):
            batch = next(self.batches, None)
            return (
                None
                if batch is None
                else {name: batch.get(name, np.zeros_like(batch["input_ids"])) for name in inputs}
            )

    import onnx

    graph = onnx.load(str(source), load_external_data=False).graph
    wanted = {node.name for node in quantized_products(graph)}
    kept = [node.name for node in graph.node if node.name not in wanted]
    quantize_static(
        str(source),
        str(target),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul"],
        nodes_to_exclude=kept,
        extra_options={"ActivationSymmetric": True},
    )


def graph_bytes(graph: Path) -> int:
    return sum(path.stat().st_size for path in (graph, graph.with_name(graph.name + ".data")) if path.exists())


def f1(gold: list[list[str]], tags: list[list[str]]) -> float:
    from seqeval.metrics import f1_score

    return 100 * f1_score(gold, tags)


ONNX_WAYS = ("dynamic", "static QDQ", "mixed", "per token", "smooth alone", "smooth", "weights int8", "weights int4")
TORCH_WAYS = ("PyTorch fp32", "PyTorch int8 (dynamic)", "PyTorch bf16 backbone")


def measure_head(name: str, checkpoint: Path, sentences: int, rounds: int, work: Path, ways: list[str]) -> list[dict]:
    folder = work / name
    export_onnx(checkpoint, folder)
    fp32, tokenizer, task = load_export(folder)
    sample, _ = calibration_sample(task)
    source = folder / "model.onnx"

    def answer(model):
        return answers(task, model, tokenizer, sample)

    graphs = {FP32: source}
    builders = {
        "dynamic": lambda target: quantize_dynamic_graph(source, target),
        "static QDQ": lambda target: static_qdq(source, target, tokenizer, sample, fp32.export["inputs"]),
        "per token": lambda target: quantize_smooth_graph(
            source, target, smoothing_scales(source, ranges, alpha=None)
        ),
        "smooth alone": lambda target: quantize_smooth_graph(source, target, smoothing_scales(source, ranges)),
        "smooth": lambda target: calibrated_smooth_graph(source, target, fp32, answer),
        "weights int8": lambda target: quantize_weights_graph(source, target),
        "weights int4": lambda target: quantize_weights_graph(source, target, bits=4),
    }
    ranges = input_ranges(source, fp32, answer) if {"per token", "smooth alone"} & set(ways) else {}
    built = {}
    for way, build in builders.items():
        if way not in ways:
            continue
        target = folder / f"{way.replace(' ', '_')}.onnx"
        started = time.perf_counter()
        build(target)
        graphs[way], built[way] = target, time.perf_counter() - started
    if "mixed" in ways:
        errors = per_tensor_errors(source, fp32, answer)
        left = [node for node, error in errors.items() if error > MIXED_ERROR]
        mixed = folder / "mixed.onnx"
        quantize_dynamic_graph(source, mixed, keep_fp32=left)
        graphs[f"mixed ({len(left)} of {len(errors)} products fp32)"] = mixed

    test = load_conll2003()["test"].filter(lambda row: len(row["tokens"]) > 0).select(range(sentences))
    names = test.features["ner_tags"].feature.names
    words, gold = list(test["tokens"]), [[names[i] for i in row] for row in test["ner_tags"]]
    models = {way: (fp32 if way == FP32 else OnnxModel.of_graph(path, fp32.export)) for way, path in graphs.items()}
    torch_tokenizer = tokenizer
    for way in TORCH_WAYS:
        if way in ways:
            model, torch_tokenizer, _ = load_checkpoint(checkpoint)
            model.float().eval()
            if way == "PyTorch int8 (dynamic)":
                quantize_int8(model, allow_lossy=True)
            elif way == "PyTorch bf16 backbone":
                model.dwatt.backbone.to(dtype=torch.bfloat16)
            models[way] = model
    tags = {
        way: answers(task, model, tokenizer if way in graphs else torch_tokenizer, words)
        for way, model in models.items()
    }
    timings = results_files.interleaved_timings(
        {
            way: (
                lambda model=model, way=way: answers(
                    task, model, tokenizer if way in graphs else torch_tokenizer, words
                )
            )
            for way, model in models.items()
        },
        rounds,
        FP32,
    )
    reference, base_f1 = tags[FP32], f1(gold, tags[FP32])
    total = sum(map(len, reference))
    rows = []
    for way in models:
        same = sum(a == b for mine, theirs in zip(reference, tags[way]) for a, b in zip(mine, theirs))
        score = f1(gold, tags[way])
        path = graphs.get(way)
        rows.append(
            {
                "head": name,
                "way": way,
                "words_agree": same / total,
                "sentences_agree": statistics.fmean(mine == theirs for mine, theirs in zip(reference, tags[way])),
                "f1": score,
                "f1_change": score - base_f1,
                "seconds": timings["median"][way],
                "time_vs_fp32_graph": timings["median"][way] / timings["median"][FP32],
                "mib": graph_bytes(path) / 2**20 if path else None,
                "build_seconds": built.get(way),
            }
        )
    rows.append({"head": name, "way": FP32 + results_files.AGAIN, "noise_control": timings["noise_control"]})
    return rows


def table(result: dict) -> str:
    """Every head's ways in one table (the serving guide quotes it)."""
    lines = [
        "| head | way | words as fp32 | sentences as fp32 | F1 | F1 change | × fp32 graph time | MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {row['head']} | {row['way']} | {100 * row['words_agree']:.2f}% | {100 * row['sentences_agree']:.1f}% | "
        f"{row['f1']:.2f} | {row['f1_change']:+.2f} | {row['time_vs_fp32_graph']:.2f} | "
        f"{'' if row['mib'] is None else format(row['mib'], '.0f')} |"
        for row in result["rows"]
        if "words_agree" in row
    ]
    return "\n".join(lines) + "\n"


def capabilities(result: dict) -> str:
    cpu = result["cpu"]
    return f"{cpu['model']}: " + ", ".join(f"{flag} {'yes' if cpu[flag] else 'no'}" for flag in CPU_FLAGS)


def markdown(result: dict) -> str:
    controls = ", ".join(
        f"{row['head']} {row['noise_control']:.2f}" for row in result["rows"] if "noise_control" in row
    )
    return "\n".join(
        [
            f"# int8 ways against the fp32 graph, per head ({result['environment']['device_name']})\n",
            f"CPU: {capabilities(result)}. Commands: {', '.join(f'`{c}`' for c in result['commands'])}. Agreement: the "
            f"share of words (sentences) tagged as the fp32 ONNX graph tags them, on the first {result['sentences']} "
            "CoNLL-03 test sentences; F1: seqeval on the same sentences; time: `dwatt predict`'s tagging of them, median "
            f"of {result['rounds']} interleaved rounds, against the fp32 graph's; noise control (the fp32 graph timed twice "
            f"a round): {controls}. Size: the graph with its weights file.\n",
            table(result),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head", action="append", required=True, help="NAME=CHECKPOINT (repeat)")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--ways",
        default=",".join(ONNX_WAYS + TORCH_WAYS),
        help="comma-separated (default: all): " + ", ".join(ONNX_WAYS + TORCH_WAYS),
    )
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    heads = dict(item.split("=", 1) for item in args.head)
    earlier_path = Path(args.output) / "int8_decoders_cpu.json"
    earlier = json.loads(earlier_path.read_text()) if earlier_path.exists() else {"rows": [], "commands": []}
    rows = [row for row in earlier["rows"] if row["head"] not in heads]
    with tempfile.TemporaryDirectory() as work:
        for name, checkpoint in heads.items():
            rows += measure_head(name, Path(checkpoint), args.sentences, args.rounds, Path(work), args.ways.split(","))
    result = {
        "rows": rows,
        "cpu": cpu_capabilities(),
        "environment": results_files.environment(),
        "sentences": args.sentences,
        "rounds": args.rounds,
        "commands": sorted(
            set(earlier.get("commands", [])) | {results_files.command_with_heads("int8_decoders.py", argv)}
        ),
    }
    results_files.write(args.output, "int8_decoders_cpu", result, markdown(result))


if __name__ == "__main__":
    main()
