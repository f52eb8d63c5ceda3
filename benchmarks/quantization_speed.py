"""Which int8 path to use on a CPU: one batch through a DWAtt tagger in fp32 and in each int8 way at hand.

On a batch of 32 CoNLL-03 dev sentences (padded to the longest), a DWAtt tagger on MiniLM (random head: speed does
not depend on its values), timed in interleaved rounds with the order rotated, fp32 timed twice as the noise control:
- PyTorch fp32;
- PyTorch's dynamic int8 (`torch.ao.quantization.quantize_dynamic` on the backbone and fusion, as
  `dwatt.serving.quantization.quantize_int8` does), with 8-bit activations on every linear map (the default where the
  CPU
  computes them exactly), and with 7-bit ones and the feed-forward up-projections in fp32 (the fallback);
- torchao's `Int8DynamicActivationInt8WeightConfig` and `Int8WeightOnlyConfig` (when torchao is installed), eager;
- onnxruntime on the `dwatt export` graph, fp32 and its int8 quantization (when the export extra is installed).
Each way's largest logit difference to fp32 is recorded beside its time.

    python benchmarks/quantization_speed.py --rounds 15

Writes `results/quantization_speed_cpu.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import tempfile
from pathlib import Path

import results_files
import torch

from dwatt import DWAttForTokenClassification
from dwatt.data import CONLL_LABELS, load_conll2003, load_tokenizer
from dwatt.portable import backbone_folder, portable_path
from dwatt.serving.quantization import quantize_int8

HERE = Path(__file__).resolve().parent
CONTROL = "PyTorch fp32"


def torchao_ways(model) -> dict:
    if importlib.util.find_spec("torchao") is None:
        return {}
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_

    ways = {}
    for name, config in (
        ("torchao int8 dynamic", Int8DynamicActivationInt8WeightConfig()),
        ("torchao int8 weight-only", Int8WeightOnlyConfig()),
    ):
        quantized = copy.deepcopy(model)
        quantize_(quantized.dwatt, config)
        ways[name] = quantized
    return ways


def onnx_ways(checkpoint: Path, folder: Path) -> dict:
    if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnxscript") is None:
        return {}
    from dwatt.serving.export import export_onnx
    from dwatt.serving.onnx_runtime import OnnxModel

    export_onnx(checkpoint, folder, quantize="int8")
    return {"onnxruntime fp32": OnnxModel(folder), "onnxruntime int8": OnnxModel(folder, quantize="int8")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default=None, help="default: MiniLM from the PyPI package")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    backbone = backbone_folder(args.backbone)
    torch.set_grad_enabled(False)
    tokenizer = load_tokenizer(backbone)
    sentences = load_conll2003()["validation"]["tokens"][: args.batch]
    batch = dict(tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt"))
    torch.manual_seed(0)
    model = DWAttForTokenClassification.from_backbone(backbone, fusion="dwatt", num_labels=len(CONLL_LABELS)).eval()
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(Path(folder) / "model")
        tokenizer.save_pretrained(Path(folder) / "model")
        ways = {
            CONTROL: model,
            "PyTorch int8 (dynamic)": quantize_int8(copy.deepcopy(model), full_range=True),
            "PyTorch int8, 7-bit activations, FFN up fp32": quantize_int8(copy.deepcopy(model), full_range=False),
        }
        ways |= torchao_ways(model)
        ways |= onnx_ways(Path(folder) / "model", Path(folder) / "onnx")
        reference = model(**batch).logits
        # an ONNX way takes and gives arrays; torch tensors on the CPU convert both ways
        difference = {
            name: float((torch.as_tensor(way(**batch).logits) - reference).abs().max()) for name, way in ways.items()
        }
        timings = results_files.interleaved_timings(
            {name: (lambda way=way: way(**batch)) for name, way in ways.items()}, args.rounds, CONTROL, warmup=2
        )
    rows = [
        {
            "way": name,
            "ms": round(1000 * seconds, 1),
            "ratio_to_fp32": round(seconds / timings["median"][CONTROL], 3),
            "max_abs_logit_difference": difference.get(name.replace(results_files.AGAIN, "")),
        }
        for name, seconds in timings["median"].items()
    ]
    result = {
        "backbone": portable_path(backbone),
        "batch": {"sentences": args.batch, "padded_to": int(batch["input_ids"].shape[1])},
        "rounds": args.rounds,
        "noise_control": round(timings["noise_control"], 3),
        "rows": rows,
        "environment": results_files.environment(torch.device("cpu")),
        "command": results_files.command("quantization_speed.py", argv),
    }
    lines = [
        f"# int8 ways on the CPU ({result['environment']['device_name']})\n",
        f"`{result['command']}`: {result['backbone']}, a DWAtt tagger, one batch of {args.batch} CoNLL-03 dev "
        f"sentences (padded to {result['batch']['padded_to']} tokens), median of {args.rounds} interleaved rounds "
        f"(order rotated; fp32 timed twice, the noise control: **{result['noise_control']:.3f}**).\n",
        "| way | ms | x fp32 | largest logit difference to fp32 |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['way']} | {r['ms']:.1f} | {r['ratio_to_fp32']:.3f} | {r['max_abs_logit_difference']:.2e} |"
        for r in rows
    ]
    results_files.write(args.output, "quantization_speed_cpu", result, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
