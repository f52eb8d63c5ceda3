"""Size of a head-only checkpoint against a full one, per fusion, on a RoBERTa-large-shaped model.

Random weights (no RoBERTa weights exist offline; sizes do not depend on the values). Both checkpoints are written
by `save_pretrained` (fp32 safetensors) into a temporary folder and measured on disk. Writes
`results/checkpoint_size.json` and `.md` next to this file.

    python benchmarks/checkpoint_size.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from transformers import RobertaConfig

from dwatt.defaults import ROBERTA_LARGE_SHAPE
from dwatt import DWAttConfig, RobertaDWAttForTokenClassification

HERE = Path(__file__).resolve().parent


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def main() -> int:
    rows = []
    for fusion in ("dwatt", "concat", "base_plus_n", "scalar_mix", "base"):
        torch.manual_seed(0)
        config = DWAttConfig(
            encoder_config=RobertaConfig(**ROBERTA_LARGE_SHAPE), fusion=fusion, num_labels=9, backbone_name_or_path="roberta-large"
        )
        model = RobertaDWAttForTokenClassification(config)
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
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    report = {"benchmark": "checkpoint_size", "command": "python benchmarks/checkpoint_size.py", "shape": ROBERTA_LARGE_SHAPE, "rows": rows}
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
    (out / "checkpoint_size.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
