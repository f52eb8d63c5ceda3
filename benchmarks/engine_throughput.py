"""The stacked-copies engine's training throughput as a fraction of the machine's matmul throughput, in one run.

`dwatt.stacked_heads.train_heads` trains copies of an FE head (a grid's learning rates; a probe's layers) on one
feature
cache. How much of the machine it uses is what this measures: the floating-point operations of the products
(matrix multiplications and attention, counted by `torch.utils.flop_counter.FlopCounterMode` on one epoch of the same
copies) per second of training, against the operations per second of one large matrix product measured in the same
run, between the same rounds. Each head is timed run one copy after the other and batched over the copies (`vmap`,
one batched product per layer of the head: the default for per-token fusions, chosen on these figures); a token
classifier's probe trains as `LinearProbes` (one product per layer read for all the copies that read it), a text
classifier's (AG News, pooled features) as stacked copies, timed both ways. The settings run in rotated rounds, the
matmul measured twice a round as the noise control; each figure is the median over rounds.

    python benchmarks/engine_throughput.py                            # MiniLM, one thread, 5 rates, N = 32
    python benchmarks/engine_throughput.py --backbone models/all-mpnet-base-v2 --threads 2
    python benchmarks/engine_throughput.py --backbone random-large --tokenizer .tok   # on the GPU machine:
    RoBERTa-large's
                                                                                      # shape, random weights

Writes `results/engine_throughput_<backbone>_<device>.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import results_files
import torch
from grid_speed import random_large_backbone
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig

from dwatt.defaults import default_backbone_path
from dwatt.portable import backbone_folder, portable_path
from dwatt.stacked_heads import HeadCopy, train_heads
from dwatt.tasks import task_named
from dwatt.training import RunConfig
from dwatt.training.together import procedures

HERE = Path(__file__).resolve().parent
RATES = (5e-5, 3e-4, 1e-3, 3e-3, 1e-2)
MATMUL = "matmul (1024 x 1024 x 1024)"


def matmul_seconds(device: torch.device, size: int = 1024, repeats: int = 20) -> tuple[float, float]:
    """Seconds for `repeats` fp32 products of two `size` x `size` matrices, and their floating-point operations."""
    a, b = (torch.randn(size, size, device=device) for _ in range(2))
    torch.mm(a, b)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started, 2.0 * size**3 * repeats


class Setting:
    """One head's copies on one prepared group (`TrainedTogether`): what `train_heads` is given, and how it batches
    them."""

    def __init__(self, name: str, setup, copies: list[HeadCopy], vectorize: bool, seed: int, task: str = "ner"):
        self.name, self.setup, self.copies, self.vectorize, self.seed = name, setup, copies, vectorize, seed
        self.metric = task_named(task).score

    def train(self) -> float:
        _, timings = train_heads(
            self.setup.model,
            self.setup.train_set,
            self.setup.dev_set,
            self.setup.collator,
            self.copies,
            self.setup.dev_metrics.score_ids,
            seed=self.seed,
            batch_size=16,
            vectorize=self.vectorize,
            metric=self.metric,
        )
        return timings["train_seconds"]

    def flops(self) -> int:
        """The products' operations of training every copy (and of scoring the dev sentences: a few forward passes
        over --dev-sentences, 1 by default, where training passes over N x C sentences forward and back)."""
        with FlopCounterMode(display=False) as counter:
            self.train()
        return counter.get_total_flops()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backbone",
        default=None,
        help="default: the embedded MiniLM; random-large: RoBERTa-large's "
        "shape with random weights (grid_speed.random_large_backbone)",
    )
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder for random-large (default: MiniLM's)")
    parser.add_argument("--fusions", default="dwatt,concat,scalar_mix")
    parser.add_argument("--n-shot", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--dev-sentences", type=int, default=1, help="scored after each epoch, not timed")
    parser.add_argument(
        "--cls-n-shot",
        type=int,
        default=16,
        help="also a probe of AG News text classifiers on this many texts per class (0: none)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    work = tempfile.mkdtemp(prefix="dwatt-engine-")
    if args.backbone == "random-large":
        backbone = str(random_large_backbone(Path(work) / "random-large", args.tokenizer))
    else:
        backbone = args.backbone or str(default_backbone_path())
    backbone_name = "random-large" if args.backbone == "random-large" else portable_path(backbone).split("/")[-1]

    def prepared(fusion: str, cache_layers: list[int] | None = None, layers: str = "all", task: str = "ner"):
        config = RunConfig(
            backbone=backbone,
            fusion=fusion,
            layers=layers,
            task=task,
            n_shot=args.n_shot if task == "ner" else args.cls_n_shot,
            epochs=args.epochs,
            dev_sentences=args.dev_sentences,
            output_dir=f"{work}/{task}-{fusion}",
            save_model=False,
            progress=False,
            seed=0,
        )
        setup = procedures(task).prepare_together(config, cache_layers)
        setup.model.to(device)
        return setup

    settings: dict[str, Setting] = {}
    for fusion in args.fusions.split(","):
        setup = prepared(fusion)
        copies = [HeadCopy(args.epochs, rate) for rate in RATES]
        for vectorize in (False, True):
            name = f"{fusion}, {len(copies)} rates, {'vmap' if vectorize else 'one after another'}"
            settings[name] = Setting(name, setup, copies, vectorize, seed=0)
    layers = AutoConfig.from_pretrained(backbone_folder(backbone)).num_hidden_layers
    probe = prepared("base", cache_layers=list(range(1, layers + 1)), layers=str(layers))
    copies = [HeadCopy(args.epochs, rate, layer) for layer in range(layers) for rate in RATES]
    settings[f"probe, {layers} layers x {len(RATES)} rates (LinearProbes)"] = Setting("probe", probe, copies, False, 0)
    if args.cls_n_shot:  # a text classifier's probe: pooled features, a Base head on each layer
        probe = prepared("base", cache_layers=list(range(1, layers + 1)), layers=str(layers), task="cls")
        for vectorize in (False, True):
            name = (
                f"AG News probe, {layers} layers x {len(RATES)} rates, {'vmap' if vectorize else 'one after another'}"
            )
            settings[name] = Setting(name, probe, copies, vectorize, seed=0, task="cls")

    flops = {name: setting.flops() for name, setting in settings.items()}
    seconds: dict[str, list[float]] = {name: [] for name in [MATMUL, *settings, MATMUL + results_files.AGAIN]}
    matmul_flops = 0.0
    for _, setting in results_files.rotated_rounds(seconds, args.rounds):
        if setting.startswith(MATMUL):
            spent, matmul_flops = matmul_seconds(device)
            seconds[setting].append(spent)
        else:
            seconds[setting].append(settings[setting].train())
    median = {name: statistics.median(values) for name, values in seconds.items()}
    peak = matmul_flops / median[MATMUL]
    rows = {
        name: {
            "train_seconds": round(median[name], 3),
            "gflop": round(flops[name] / 1e9, 3),
            "gflop_per_second": round(flops[name] / median[name] / 1e9, 2),
            "fraction_of_matmul": round(flops[name] / median[name] / peak, 3),
            "copies": len(settings[name].copies),
        }
        for name in settings
    }
    result = {
        "settings": {
            "backbone": backbone_name if args.backbone == "random-large" else portable_path(backbone),
            "n_shot": args.n_shot,
            "cls_n_shot": args.cls_n_shot,
            "epochs": args.epochs,
            "dev_sentences": args.dev_sentences,
            "rounds": args.rounds,
            "learning_rates": list(RATES),
            "threads": args.threads,
            "batch_size": 16,
        },
        "matmul_gflop_per_second": round(peak / 1e9, 2),
        "noise_control": round(median[MATMUL + results_files.AGAIN] / median[MATMUL], 3),
        "heads": rows,
        "seconds": seconds,
        "environment": results_files.environment(device),
        "command": results_files.command("engine_throughput.py", argv),
    }
    lines = [
        f"# The stacked-copies engine against the machine's matmul throughput ({result['environment']['device_name']})\n",
        f"Command: `{result['command']}`. Training of the copies on one CoNLL-03 sample of N = {args.n_shot} "
        + (f"and one AG News sample of {args.cls_n_shot} texts per class " if args.cls_n_shot else "")
        + f"({args.epochs} epochs, batch 16; the dev scoring after each epoch not timed): the products' floating-point operations "
        f"(FlopCounterMode) per second, against one 1024 x 1024 x 1024 fp32 product's "
        f"**{result['matmul_gflop_per_second']} GFLOP/s** measured between the same rounds (timed twice a round: "
        f"noise control **{result['noise_control']:.3f}**). Medians of {args.rounds} rotated rounds.\n",
        "| head | copies | train seconds | GFLOP | GFLOP/s | fraction of matmul |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {row['copies']} | {row['train_seconds']:.2f} | {row['gflop']:.2f} | {row['gflop_per_second']:.2f} "
        f"| {row['fraction_of_matmul']:.3f} |"
        for name, row in rows.items()
    ]
    results_files.write(
        args.output, f"engine_throughput_{backbone_name}_{device.type}", result, "\n".join(lines) + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
