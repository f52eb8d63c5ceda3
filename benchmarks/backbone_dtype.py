"""bf16 against fp32 for the backbone, on the same sentences and seeds: the speed of its pass (what feature caching
runs) and the scores of a probe (`dwatt probe --backbone-dtype`), naming the CPU: bf16 matmuls are fast only where it
has AVX-512 BF16 or AMX instructions, and otherwise may be slower than fp32.

- Speed: each backbone's pass over `--sentences` CoNLL-03 dev sentences in batches of 16, every hidden state kept (as
  `dwatt.features.build.build_feature_cache` runs it), loaded in fp32 and in bf16, timed in rotated rounds with fp32 timed
  twice as the noise control (`results_files.interleaved_timings`); tokens per second over the real tokens.
- Scores: `dwatt probe` (every layer, its learning rates, trained together) once with the backbone in fp32 and once in
  bf16, the same N, seed and dev subset, features cached in fp32 so that the backbone's dtype is the only difference:
  each layer's best dev F1 (over the rates), the layer each chooses, the largest difference and the rank correlation.

    python benchmarks/backbone_dtype.py --backbones
    sentence-transformers/all-MiniLM-L6-v2,models/SmolLM2-135M-Instruct-q4,\
models/Qwen2.5-Coder-1.5B-Instruct-q4 --probe models/SmolLM2-135M-Instruct-q4 --threads 1

Writes `results/backbone_dtype_cpu.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import results_files
import torch

HERE = Path(__file__).resolve().parent
DTYPES = ("float32", "bfloat16")
BATCH = 16


def pass_timings(backbone: str, sentences: int, rounds: int) -> dict:
    """Seconds of the backbone's pass over the sentences in each dtype, interleaved, and its tokens per second."""
    from transformers import AutoModel

    from dwatt.data import load_conll2003
    from dwatt.portable import backbone_folder
    from dwatt.tokenization import load_tokenizer

    folder = backbone_folder(backbone)
    tokenizer = load_tokenizer(folder)
    texts = [" ".join(words) for words in load_conll2003()["validation"]["tokens"] if words][:sentences]
    batches = [tokenizer(texts[i : i + BATCH], padding=True, return_tensors="pt") for i in range(0, len(texts), BATCH)]
    tokens = sum(int(batch["attention_mask"].sum()) for batch in batches)
    models = {dtype: AutoModel.from_pretrained(folder, dtype=getattr(torch, dtype)).eval() for dtype in DTYPES}

    def run(dtype):
        def step():
            with torch.inference_mode():
                for batch in batches:
                    models[dtype](**batch, output_hidden_states=True)

        return step

    timings = results_files.interleaved_timings(
        {dtype: run(dtype) for dtype in DTYPES}, rounds, control="float32", warmup=1
    )
    median = timings["median"]
    return {
        "backbone": backbone,
        "layers": models["float32"].config.num_hidden_layers,
        "sentences": len(texts),
        "tokens": tokens,
        "seconds": timings["seconds"],
        "median_s": median,
        "tokens_per_s": {dtype: round(tokens / median[dtype], 1) for dtype in DTYPES},
        "bf16_over_fp32_time": round(median["bfloat16"] / median["float32"], 3),
        "noise_control": round(timings["noise_control"], 3),
    }


def probe_scores(backbone: str, n_shot: int, dev_sentences: int, epochs: int, work: Path) -> dict:
    """Each layer's best dev F1 of a probe in each dtype, and how the two compare."""
    from scipy.stats import spearmanr

    from dwatt.experiment.probe import ProbeSettings, run_probe
    from dwatt.training import EXECUTION

    found = {}
    for dtype in DTYPES:
        settings = ProbeSettings(
            backbone=backbone,
            n_shot=n_shot,
            epochs=epochs,
            dev_sentences=dev_sentences,
            backbone_dtype=dtype,
            cache_dtype="float32",
            widen=0,  # the grid the committed result was measured on
            save_model=False,
            progress=False,
            results=str(work / dtype / "results.jsonl"),
        )
        outcome = run_probe(settings, EXECUTION)
        best = {layer: max(outcome.mean(layer, rate) for rate in outcome.rates) for layer in outcome.layers}
        found[dtype] = {
            "best_dev_f1_by_layer": {str(k): round(v, 2) for k, v in best.items()},
            "chosen_layer": outcome.chosen[0],
            "chosen_rate": outcome.chosen[1],
            "chosen_dev_f1": round(outcome.mean(*outcome.chosen), 2),
        }
    layers = list(found["float32"]["best_dev_f1_by_layer"])
    fp32, bf16 = ([found[dtype]["best_dev_f1_by_layer"][layer] for layer in layers] for dtype in DTYPES)
    differences = [b - a for a, b in zip(fp32, bf16)]
    return {
        "backbone": backbone,
        "n_shot": n_shot,
        "dev_sentences": dev_sentences,
        "epochs": epochs,
        **found,
        "largest_difference": round(max(differences, key=abs), 2),
        "mean_absolute_difference": round(statistics.fmean(abs(d) for d in differences), 2),
        "spearman_by_layer": round(float(spearmanr(fp32, bf16).statistic), 3),
    }


def markdown(result: dict) -> str:
    lines = [
        f"# The backbone in bf16 against fp32\n\n`{result['command']}`; {result['cpu']}, "
        f"{'with' if result['avx512_bf16'] else 'without'} AVX-512 BF16, {'with' if result['amx_bf16'] else 'without'} "
        f"AMX; {result['threads']} thread(s)." + (f" {result['note']}" if result.get("note") else ""),
        "\n## The backbone's pass (every hidden state kept, batches of 16)\n",
        "| backbone | layers | sentences | tokens | fp32 tokens/s | bf16 tokens/s | bf16 time / fp32 time | noise control |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["speed"]:
        lines.append(
            f"| {row['backbone']} | {row['layers']} | {row['sentences']} | {row['tokens']} | "
            f"{row['tokens_per_s']['float32']:.0f} | {row['tokens_per_s']['bfloat16']:.0f} | "
            f"{row['bf16_over_fp32_time']:.2f} | {row['noise_control']:.2f} |"
        )
    probe = result.get("probe")
    if probe:
        lines += [
            f"\n## The probe's scores ({probe['backbone']}, CoNLL-03, N = {probe['n_shot']}, {probe['epochs']} "
            f"epochs, {probe['dev_sentences']} dev sentences, seed 0, features cached in fp32)\n",
            "| backbone dtype | chosen layer | its rate | its dev F1 |",
            "|---|---|---|---|",
        ]
        for dtype in DTYPES:
            lines.append(
                f"| {dtype} | {probe[dtype]['chosen_layer']} | {probe[dtype]['chosen_rate']:g} | "
                f"{probe[dtype]['chosen_dev_f1']:.2f} |"
            )
        lines.append(
            f"\nEach layer's best dev F1, bf16 minus fp32: largest {probe['largest_difference']:+.2f}, mean "
            f"absolute {probe['mean_absolute_difference']:.2f}; Spearman correlation of the layers' scores "
            f"{probe['spearman_by_layer']:.3f}.\n"
        )
        layers = list(probe["float32"]["best_dev_f1_by_layer"])
        lines += ["| layer | " + " | ".join(layers) + " |", "|---|" + "---|" * len(layers)]
        for dtype in DTYPES:
            lines.append(
                f"| {dtype} | " + " | ".join(f"{probe[dtype]['best_dev_f1_by_layer'][k]:.1f}" for k in layers) + " |"
            )
    return "\n".join(lines) + "\n"


def readme_text(result: dict) -> str:
    """What docs/backbones.md says of the committed measurement (generated by docs/generated.py)."""
    cpu = (
        f"{result['cpu']} ({'with' if result['avx512_bf16'] else 'without'} AVX-512 BF16, "
        f"{'with' if result['amx_bf16'] else 'without'} AMX), {result['threads']} thread(s)"
    )
    passes = "; ".join(
        f"{Path(row['backbone']).name} {row['bf16_over_fp32_time']:.2f}x (noise control {row['noise_control']:.2f})"
        for row in result["speed"]
    )
    text = f"Measured on {cpu}: the backbone's pass in bf16 takes this share of its fp32 time: {passes}."
    probe = result.get("probe")
    if probe:
        text += (
            f" A probe of {Path(probe['backbone']).name} (CoNLL-03, N = {probe['n_shot']}, {probe['dev_sentences']} "
            f"dev sentences) chose layer {probe['float32']['chosen_layer']} in fp32 and "
            f"{probe['bfloat16']['chosen_layer']} in bf16; its layers' best dev F1 differ by at most "
            f"{abs(probe['largest_difference']):.2f} points (mean {probe['mean_absolute_difference']:.2f}; Spearman "
            f"{probe['spearman_by_layer']:.3f})."
        )
    return text + " (`benchmarks/results/backbone_dtype_cpu.md`)\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backbones",
        default="sentence-transformers/all-MiniLM-L6-v2",
        help="comma-separated Hub ids or folders whose pass is timed",
    )
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--probe", default=None, help="a backbone to probe in each dtype (default: none)")
    parser.add_argument("--n-shot", type=int, default=16)
    parser.add_argument("--dev-sentences", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--note", default=None, help="what else the machine ran meanwhile")
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    from dwatt.portable import portable_path

    torch.set_num_threads(args.threads)
    speed = []
    for backbone in (name for name in args.backbones.split(",") if name):
        row = pass_timings(backbone, args.sentences, args.rounds)
        speed.append(row | {"backbone": portable_path(backbone)})
        print(row, flush=True)
    result = {
        "benchmark": "backbone_dtype",
        "command": results_files.command("backbone_dtype.py", argv),
        **results_files.cpu_facts(),
        "threads": args.threads,
        "environment": results_files.environment(),
        "note": args.note,
        "speed": speed,
    }
    if args.probe:
        with tempfile.TemporaryDirectory(prefix="dwatt-dtype-") as work:
            probe = probe_scores(args.probe, args.n_shot, args.dev_sentences, args.epochs, Path(work))
        result["probe"] = probe | {"backbone": portable_path(args.probe)}
    results_files.write(args.output, "backbone_dtype_cpu", result, markdown(result))


if __name__ == "__main__":
    main()
