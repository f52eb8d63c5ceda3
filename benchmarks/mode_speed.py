"""Training step time by mode on the CPU with real weights: LoRA against FT and FE.

One AdamW step (forward, backward, update) of a DWAtt tagger, batch 16 of the first CoNLL-03 training sentences
(padded to the batch's longest), in each mode as `dwatt train` sets it up (`dwatt.training.trainer_run.set_training_mode`):

- FE: the backbone frozen and in eval mode, stepping on the live backbone (a run with the feature cache skips even
  that forward, see `fe_cache.py`);
- LoRA: rank 8 on the family's default targets (query and value for BERT's way), alpha 16, dropout 0.05, the
  backbone in train mode;
- FT: everything trains; timed twice, the second run as if it were another mode: its ratio is the noise.

Interleaved rounds, the order rotated from round to round; each ratio is the median over rounds of a mode's time over
FT's in the same round. The step times explain a run's training time; the dev evaluation after every epoch costs the
same in LoRA and FT (one backbone pass over the dev sentences) and is not timed here.

    python benchmarks/mode_speed.py --rounds 30

Writes `results/mode_speed_cpu.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import results_files
import torch

from dwatt import DWAttForTokenClassification
from dwatt.data import load_conll2003, load_tokenizer
from dwatt.portable import backbone_folder, portable_path
from dwatt.run_config import RunConfig
from dwatt.training.trainer_run import set_training_mode

HERE = Path(__file__).resolve().parent
FT_AGAIN = "ft again"


def batch_of(backbone: str, size: int) -> dict:
    sentences = load_conll2003()["train"].filter(lambda row: len(row["tokens"]) > 0)["tokens"][:size]
    encoded = load_tokenizer(backbone)(
        sentences, is_split_into_words=True, padding=True, truncation=True, max_length=128, return_tensors="pt"
    )
    labels = torch.randint(0, 9, encoded["input_ids"].shape, generator=torch.Generator().manual_seed(0))
    return dict(encoded) | {"labels": labels}


def stepper(backbone: str, mode: str, batch: dict):
    """A closure doing one optimizer step of a fresh DWAtt tagger in `mode`, and its trainable parameter count."""
    torch.manual_seed(0)
    model = DWAttForTokenClassification.from_backbone(backbone, fusion="dwatt", num_labels=9).train()
    set_training_mode(model, RunConfig(mode=mode, backbone=backbone, lora_dropout=0.05, progress=False))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=5e-5)

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        optimizer.step()

    return step, sum(p.numel() for p in trainable)


def main(argv: list[str] | None = None) -> int:
    from dwatt.defaults import DEFAULT_BACKBONE_HUB_ID

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default=DEFAULT_BACKBONE_HUB_ID)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    folder = backbone_folder(args.backbone)
    batch = batch_of(folder, args.batch)
    steps, trainable = {}, {}
    for mode in ("fe", "lora", "ft", FT_AGAIN):
        steps[mode], trainable[mode] = stepper(folder, mode.split()[0], batch)
    for step in steps.values():
        for _ in range(args.warmup):
            step()
    times = {mode: [] for mode in steps}
    for _, mode in results_files.rotated_rounds(steps, args.rounds):
        started = time.perf_counter()
        steps[mode]()
        times[mode].append(time.perf_counter() - started)
    rows = [
        {
            "mode": mode,
            "trainable_parameters": trainable[mode],
            "step_ms": round(1000 * statistics.median(t), 2),
            "ratio_to_ft": round(statistics.median(v / f for v, f in zip(t, times["ft"])), 4),
        }
        for mode, t in times.items()
    ]
    result = {
        "settings": {
            "backbone": portable_path(args.backbone),
            "batch": args.batch,
            "tokens": int(batch["input_ids"].shape[1]),
            "rounds": args.rounds,
            "warmup": args.warmup,
        },
        "rows": rows,
        "environment": results_files.environment(torch.device("cpu")),
        "command": results_files.command("mode_speed.py", argv),
    }
    lines = [
        f"# Training step time by mode on the CPU ({result['environment']['device_name']})\n",
        f"DWAtt tagger on {result['settings']['backbone']}, one AdamW step on a batch of {args.batch} x "
        f"{result['settings']['tokens']} tokens; median of {args.rounds} interleaved rounds after {args.warmup} "
        "warm-up steps, the order rotated; each ratio is the median over rounds of a mode's time over FT's in the "
        f"same round (`{FT_AGAIN}`: the noise). Command: `{result['command']}`\n",
        "| mode | trainable parameters | step ms | x FT |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['mode']} | {r['trainable_parameters']:,} | {r['step_ms']:.1f} | {r['ratio_to_ft']:.3f} |" for r in rows
    ]
    results_files.write(args.output, "mode_speed_cpu", result, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
