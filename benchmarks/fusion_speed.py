"""Inference latency, throughput and peak memory of each fusion against the plain backbone, and the training step
time of FE against FT, measured side by side in one process.

Random weights in RoBERTa-large's shape (no RoBERTa weights exist offline; speed does not depend on the values).
Every fusion model and the plain backbone (`AutoModel`, last layer only, no hidden states kept) are timed in
interleaved rounds, so drift of the machine hits them alike; each latency is the median over rounds. The target of
issue 6: DWAtt within 1.10x of the plain backbone at bf16, batch 32 x 128 tokens, on an H100.

    python benchmarks/fusion_speed.py                      # CUDA, RoBERTa-large shape, bf16, batch 32 x 128
    python benchmarks/fusion_speed.py --device cpu --shape tiny --dtype float32 --output /tmp/x   # a quick check
    python benchmarks/fusion_speed.py --cpu-real --backbones models/all-MiniLM-L6-v2,models/all-mpnet-base-v2
                                                           # real weights, fp32, CPU: 32 x 128 and 1 x 32 tokens

Writes `results/fusion_speed_<device>.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import results_files
import torch
from transformers import AutoModel, RobertaConfig

from dwatt import DWAttConfig, DWAttForTokenClassification
from dwatt.defaults import ROBERTA_LARGE_SHAPE

HERE = Path(__file__).resolve().parent
FUSIONS = ("base", "base_plus_n", "concat", "dwatt", "scalar_mix")
TINY_SHAPE = dict(
    ROBERTA_LARGE_SHAPE, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128
)


def timer(device: torch.device):
    """Seconds taken by a callable, synchronising the GPU around it."""

    def measure(step) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    return measure


def peak_memory(device: torch.device, step) -> int | None:
    if device.type != "cuda":
        return None
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device)


def build_models(encoder: RobertaConfig, device, dtype) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    models = {"backbone": AutoModel.from_config(encoder, add_pooling_layer=False)}
    for fusion in FUSIONS:
        models[fusion] = DWAttForTokenClassification(DWAttConfig(encoder_config=encoder, fusion=fusion, num_labels=9))
    return {name: model.to(device, dtype).eval() for name, model in models.items()}


def inference(models, batch, device, rounds: int, warmup: int) -> list[dict]:
    """Each round times every model once, the order rotated from round to round (no model always runs first or
    right after the same other); a model's ratio to the backbone is the median over rounds of its time over the
    backbone's time in the same round, so slow drift of the machine cancels."""
    measure = timer(device)
    steps = {name: (lambda m=model: m(**batch)) for name, model in models.items()}
    times = {name: [] for name in steps}
    with torch.inference_mode():
        for _ in range(warmup):
            for step in steps.values():
                step()
        for _, name in results_files.rotated_rounds(steps, rounds):
            times[name].append(measure(steps[name]))
        memory = {name: peak_memory(device, step) for name, step in steps.items()}
    tokens = batch["input_ids"].numel()
    return [
        {
            "model": name,
            "latency_ms": 1000 * statistics.median(values),
            "latency_vs_backbone": statistics.median(v / b for v, b in zip(values, times["backbone"])),
            "tokens_per_second": tokens / statistics.median(values),
            "peak_memory_mib": None if memory[name] is None else memory[name] / 2**20,
        }
        for name, values in times.items()
    ]


def training_steps(encoder, batch, device, dtype, rounds: int, warmup: int) -> list[dict]:
    """One AdamW step (forward, backward, update) of DWAtt in FE (frozen backbone) and FT, batch 16."""
    measure = timer(device)
    labels = torch.randint(0, 9, batch["input_ids"].shape, device=device)
    rows = []
    for mode in ("fe", "ft"):
        torch.manual_seed(0)
        model = DWAttForTokenClassification(DWAttConfig(encoder_config=encoder, fusion="dwatt", num_labels=9))
        model = model.to(device, dtype).train()
        model.freeze_backbone(mode == "fe")
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-5)

        def step():
            optimizer.zero_grad(set_to_none=True)
            model(**batch, labels=labels).loss.backward()
            optimizer.step()

        for _ in range(warmup):
            step()
        times = [measure(step) for _ in range(rounds)]
        memory = peak_memory(device, step)
        rows.append(
            {
                "mode": mode,
                "step_ms": 1000 * statistics.median(times),
                "peak_memory_mib": None if memory is None else memory / 2**20,
            }
        )
        model = optimizer = None  # freed before the next mode is built (the closure keeps its cells)
    rows[1]["step_vs_fe"] = rows[1]["step_ms"] / rows[0]["step_ms"]
    return rows


def markdown(result: dict) -> str:
    s = result["settings"]
    lines = [
        f"# Fusion speed: {s['shape']} shape, {s['dtype']}, batch {s['batch']} x {s['tokens']} tokens\n",
        f"Device: {result['environment']['device_name']}; torch {result['environment']['torch']}. "
        f"Median of {s['rounds']} interleaved rounds after {s['warmup']} warm-up rounds. Command: `{result['command']}`\n",
        "| model | latency ms | x plain backbone | tokens/s | peak memory MiB |",
        "|---|---|---|---|---|",
    ]
    for row in result["inference"]:
        memory = "—" if row["peak_memory_mib"] is None else f"{row['peak_memory_mib']:.0f}"
        lines.append(
            f"| {row['model']} | {row['latency_ms']:.2f} | {row['latency_vs_backbone']:.3f} | {row['tokens_per_second']:,.0f} | {memory} |"
        )
    lines += [
        "",
        f"Training step (DWAtt, AdamW, batch {s['train_batch']} x {s['tokens']}):",
        "",
        "| mode | step ms | peak memory MiB |",
        "|---|---|---|",
    ]
    for row in result["training"]:
        memory = "—" if row["peak_memory_mib"] is None else f"{row['peak_memory_mib']:.0f}"
        lines.append(f"| {row['mode'].upper()} | {row['step_ms']:.2f} | {memory} |")
    lines.append(f"\nFT step / FE step: {result['training'][1]['step_vs_fe']:.2f}x.")
    return "\n".join(lines) + "\n"


NOISE_CONTROL = "backbone again"
CPU_SETTINGS = ((32, 128), (1, 32))  # a batch of full-length inputs, and `dwatt predict` on one sentence


def real_backbone_rows(backbone: str, rounds: int, warmup: int) -> list[dict]:
    """Every fusion over a real pretrained backbone (fp32, CPU) against the plain `AutoModel`, per setting."""
    from dwatt.portable import backbone_folder, portable_path

    rows = []
    name, backbone = portable_path(backbone), backbone_folder(backbone)
    torch.manual_seed(0)
    plain = AutoModel.from_pretrained(backbone).eval()
    # The same backbone timed a second time, as if it were another model: its ratio is the measurement's own noise.
    models = {"backbone": plain, NOISE_CONTROL: plain}
    for fusion in FUSIONS:
        torch.manual_seed(0)
        models[fusion] = DWAttForTokenClassification.from_backbone(backbone, fusion=fusion, num_labels=9).eval()
    for batch, tokens in CPU_SETTINGS:
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(1000, plain.config.vocab_size, (batch, tokens), generator=generator)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        for row in inference(models, inputs, torch.device("cpu"), rounds, warmup):
            rows.append(
                {
                    "backbone": name,
                    "fusion": row["model"],
                    "batch": batch,
                    "tokens": tokens,
                    "latency_ms": round(row["latency_ms"], 3),
                    "ratio_to_backbone": round(row["latency_vs_backbone"], 4),
                }
            )
    return rows


def ratio_table(rows: list[dict]) -> str:
    """The CPU results at a glance (the README quotes it): each fusion's latency over the plain backbone's, one row
    per backbone and setting."""
    fusions = [f for f in (NOISE_CONTROL, *FUSIONS) if any(r["fusion"] == f for r in rows)]
    settings = list(dict.fromkeys((r["backbone"], r["batch"], r["tokens"]) for r in rows))
    ratio = {(r["backbone"], r["batch"], r["tokens"], r["fusion"]): r["ratio_to_backbone"] for r in rows}
    names = {
        NOISE_CONTROL: "backbone again (noise)",
        "base": "Base",
        "base_plus_n": "Base+n",
        "concat": "Concat",
        "dwatt": "DWAtt",
        "scalar_mix": "ScalarMix",
    }
    lines = [
        "| backbone | batch x tokens | " + " | ".join(names.get(f, f) for f in fusions) + " |",
        "|---|---|" + "---|" * len(fusions),
    ]
    for backbone, batch, tokens in settings:
        cells = [f"{ratio[(backbone, batch, tokens, f)]:.3f}" for f in fusions]
        lines.append(f"| {backbone.split('/')[-1]} | {batch} x {tokens} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def cpu_main(args) -> int:
    """`--cpu-real`: real offline weights on the CPU; `fusion_speed_cpu.json` + `.md`."""
    rows = [
        row for backbone in args.backbones.split(",") for row in real_backbone_rows(backbone, args.rounds, args.warmup)
    ]
    result = {
        "settings": {
            "dtype": "float32",
            "rounds": args.rounds,
            "warmup": args.warmup,
            "threads": torch.get_num_threads(),
        },
        "rows": rows,
        "environment": results_files.environment(torch.device("cpu")),
        "command": results_files.command("fusion_speed.py", None),
    }
    lines = [
        f"# Fusion speed on the CPU, real weights, fp32 ({result['environment']['device_name']})\n",
        f"Median of {args.rounds} interleaved rounds after {args.warmup} warm-up rounds, the order of the models "
        "rotated from round to round; the ratio is the median over rounds of a model's time over the backbone's "
        f"in the same round. Every fusion model includes its token-classification head (9 labels). "
        f"Command: `{result['command']}`\n",
        "| backbone | batch x tokens | fusion | latency ms | x plain backbone |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['backbone']} | {r['batch']} x {r['tokens']} | {r['fusion']} | {r['latency_ms']:.2f} | {r['ratio_to_backbone']:.3f} |"
        for r in rows
    ]
    lines += ["", "## Ratios to the plain backbone", "", ratio_table(rows)]
    results_files.write(args.output, "fusion_speed_cpu", result, "\n".join(lines) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-real", action="store_true", help="real offline weights on the CPU (see --backbones)")
    parser.add_argument(
        "--backbones", default=None, help="--cpu-real: comma-separated model folders (default: MiniLM)"
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shape", default="roberta-large", choices=("roberta-large", "tiny"))
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--train-batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    if args.cpu_real:
        from dwatt.defaults import DEFAULT_BACKBONE_HUB_ID

        args.backbones = args.backbones or DEFAULT_BACKBONE_HUB_ID
        return cpu_main(args)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    encoder = RobertaConfig(**(ROBERTA_LARGE_SHAPE if args.shape == "roberta-large" else TINY_SHAPE))
    generator = torch.Generator().manual_seed(0)

    def batch_of(size: int) -> dict:
        ids = torch.randint(3, encoder.vocab_size, (size, args.tokens), generator=generator)
        return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}

    models = build_models(encoder, device, dtype)
    result = {
        "settings": {
            k: getattr(args, k) for k in ("shape", "dtype", "batch", "train_batch", "tokens", "rounds", "warmup")
        },
        "inference": inference(models, batch_of(args.batch), device, args.rounds, args.warmup),
    }
    del models
    result["training"] = training_steps(encoder, batch_of(args.train_batch), device, dtype, args.rounds, args.warmup)
    result["environment"] = results_files.environment(device)
    result["command"] = results_files.command("fusion_speed.py", argv)
    results_files.write(args.output, f"fusion_speed_{device.type}", result, markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
