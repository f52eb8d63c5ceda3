"""LoRA: low-rank adapters on the frozen backbone, between FE (backbone frozen) and FT (everything trains).

Training uses PEFT, the well-kept library for it: `peft.inject_adapter_in_model` puts its LoRA layers into the
backbone in place, so the model stays a dwatt model that the stock `Trainer` trains like any other (the fusion and
head train fully, the backbone's own weights stay frozen). What leaves training needs no PEFT: a head-only checkpoint
carries the adapters' `A` and `B` matrices beside the head (`lora_dwatt.LoRAUpdates`), and loading merges
`W + (alpha / rank) * B @ A` into the backbone it fetches, in plain torch; a full checkpoint stores the merged
backbone (`pretrained_dwatt.merged_lora_state_dict`).
"""

from __future__ import annotations

from backbones_dwatt import backbone_family
from lora_dwatt import lora_target_layers

DEFAULT_RANK = 8


def default_targets(model) -> list[str]:
    """The layers LoRA adapts by default: the attention projections of the backbone's family (its row in
    `backbones_dwatt.FAMILIES`)."""
    return list(backbone_family(model.config.encoder_config).lora_targets)


def add_lora(
    model, rank: int = DEFAULT_RANK, alpha: float | None = None, dropout: float = 0.0, targets: list[str] | None = None
) -> dict:
    """
    Put LoRA adapters (rank `rank`, scale `alpha / rank`, `alpha` by default twice the rank) into the backbone's
    `targets` layers (default: the family's attention projections) and record them in `model.config.lora`. Returns
    that record. Every adapter starts as a zero update (B = 0), so the model starts as the pretrained one.
    """
    from peft import LoraConfig, inject_adapter_in_model

    targets = list(targets or default_targets(model))
    found = lora_target_layers(model.dwatt.backbone, targets)
    if not found:
        raise ValueError(
            f"--lora-targets {','.join(targets)}: no linear layer of the {model.config.encoder_config.model_type!r} "
            "backbone has that name (give the last part of a layer's path, e.g. query,value or q_proj,v_proj)"
        )
    missing = sorted(set(targets) - {path.rsplit(".", 1)[-1] for path in found})
    if missing:
        raise ValueError(f"--lora-targets: no layer of the backbone is named {', '.join(missing)}")
    record = {
        "rank": rank,
        "alpha": float(alpha if alpha is not None else 2 * rank),
        "dropout": float(dropout),
        "targets": targets,
        "merged": False,
    }
    inject_adapter_in_model(
        LoraConfig(
            r=rank,
            lora_alpha=record["alpha"],
            lora_dropout=dropout,
            target_modules=targets,
            fan_in_fan_out=any(type(layer).__name__ == "Conv1D" for layer in found.values()),
        ),
        model.dwatt.backbone,
    )
    model.config.lora = record
    model.config.validate_lora()
    return record


def is_lora_parameter(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


__all__ = ["DEFAULT_RANK", "add_lora", "default_targets", "is_lora_parameter"]
