"""Size of a head-only checkpoint against a full one, per fusion, on a RoBERTa-large-shaped model; and of a LoRA
run's head-only checkpoint (fusion, head and the adapters' low-rank matrices, rank 8 on the family's attention
projections) against the backbone's own weights file, on that shape and on the packaged MiniLM.

Random weights for RoBERTa-large (no RoBERTa weights exist offline; sizes do not depend on the values). Every
checkpoint is written by `save_pretrained` (fp32 safetensors) into a temporary folder and measured on disk. Writes
`results/checkpoint_size.json` and `.md` next to this file.

    python benchmarks/checkpoint_size.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from transformers import RobertaConfig

from dwatt import DWAttConfig, DWAttForTokenClassification
from dwatt.defaults import ROBERTA_LARGE_SHAPE

HERE = Path(__file__).resolve().parent


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def lora_sizes() -> list[dict]:
    """A LoRA head-only checkpoint's weights file against the backbone's, per backbone and fusion."""
    from transformers import AutoModel

    from dwatt.defaults import DEFAULT_BACKBONE_HUB_ID, default_backbone_path
    from dwatt.lora import add_lora

    rows = []
    with tempfile.TemporaryDirectory() as work:
        large = Path(work, "roberta-large-shape")
        torch.manual_seed(0)
        AutoModel.from_config(RobertaConfig(**ROBERTA_LARGE_SHAPE), add_pooling_layer=False).save_pretrained(large)
        for name, folder in (("roberta-large shape", large), (DEFAULT_BACKBONE_HUB_ID, default_backbone_path())):
            for fusion in ("dwatt", "concat", "base"):
                torch.manual_seed(0)
                model = DWAttForTokenClassification.from_backbone(str(folder), fusion=fusion, num_labels=9)
                add_lora(model)
                head = Path(work, f"head-{fusion}")
                model.save_pretrained(head, heads_only=True)
                row = {
                    "backbone": name,
                    "fusion": fusion,
                    "lora_parameters": sum(p.numel() for n, p in model.named_parameters() if ".lora_" in n),
                    "head_weights_bytes": (head / "model.safetensors").stat().st_size,
                    "backbone_weights_bytes": (Path(folder) / "model.safetensors").stat().st_size,
                }
                row["ratio"] = row["head_weights_bytes"] / row["backbone_weights_bytes"]
                rows.append(row)
                print(json.dumps(row), flush=True)
                del model
    return rows


def main() -> int:
    rows = []
    for fusion in ("dwatt", "concat", "base_plus_n", "scalar_mix", "base"):
        torch.manual_seed(0)
        config = DWAttConfig(
            encoder_config=RobertaConfig(**ROBERTA_LARGE_SHAPE),
            fusion=fusion,
            num_labels=9,
            backbone_name_or_path="roberta-large",
        )
        model = DWAttForTokenClassification(config)
        with tempfile.TemporaryDirectory() as work:
            full, head = Path(work, "full"), Path(work, "head")
            model.save_pretrained(full)
            model.save_pretrained(head, heads_only=True)
            row = {
                "fusion": fusion,
                "full_weights_bytes": (full / "model.safetensors").stat().st_size,
                "head_weights_bytes": (head / "model.safetensors").stat().st_size,
                "full_folder_bytes": folder_bytes(full),
                "head_folder_bytes": folder_bytes(head),
            }
        row["ratio"] = row["head_folder_bytes"] / row["full_folder_bytes"]
        rows.append(row)
        print(json.dumps(row), flush=True)
        del model
    lora_rows = lora_sizes()
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    report = {
        "benchmark": "checkpoint_size",
        "command": "python benchmarks/checkpoint_size.py",
        "shape": ROBERTA_LARGE_SHAPE,
        "rows": rows,
        "lora_rows": lora_rows,
    }
    (out / "checkpoint_size.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# Head-only vs full checkpoints, RoBERTa-large shape (24 x 1024), 9 labels, fp32 safetensors",
        "",
        "Command: `python benchmarks/checkpoint_size.py` (random weights; folder = weights + config + the two .py files).",
        "",
        "| fusion | full folder MB | head-only folder MB | head-only / full |",
        "|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['fusion']} | {row['full_folder_bytes'] / 1e6:.1f} | {row['head_folder_bytes'] / 1e6:.2f} | "
            f"{100 * row['ratio']:.2f}% |"
        )
    lines += [
        "",
        "## LoRA head-only checkpoints against the backbone's weights file",
        "",
        "A LoRA run's checkpoint (`dwatt train --mode lora`): fusion module, task head and each adapted layer's A and B "
        "(rank 8 on the family's attention projections), fp32, against the backbone's own `model.safetensors`.",
        "",
        "| backbone | fusion | LoRA parameters | head-only weights MB | backbone weights MB | head-only / backbone |",
        "|---|---|---|---|---|---|",
    ]
    for row in lora_rows:
        lines.append(
            f"| {row['backbone']} | {row['fusion']} | {row['lora_parameters']:,} | {row['head_weights_bytes'] / 1e6:.2f} | "
            f"{row['backbone_weights_bytes'] / 1e6:.1f} | {100 * row['ratio']:.2f}% |"
        )
    (out / "checkpoint_size.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
