"""LoRA: low-rank adapters on the frozen backbone, between FE (backbone frozen) and FT (everything trains).

Training uses PEFT, the well-kept library for it: `peft.inject_adapter_in_model` puts its LoRA layers into the
backbone in place, so the model stays a dwatt model that the stock `Trainer` trains like any other (the fusion and
head train fully, the backbone's own weights stay frozen). What leaves training needs no PEFT: a head-only checkpoint
carries the adapters' `A` and `B` matrices beside the head (`lora_dwatt.LoRAUpdates`), and loading merges
`W + (alpha / rank) * B @ A` into the backbone it fetches, in plain torch; a full checkpoint stores the merged
backbone (`pretrained_dwatt.merged_lora_state_dict`). Beside either, dwatt's checkpoints keep the adapters in PEFT's
own format (`save_adapter`, in `ADAPTER_FOLDER`), which PEFT and serving engines load on the plain backbone.
"""

from __future__ import annotations

import copy
from pathlib import Path

from backbones_dwatt import backbone_family
from lora_dwatt import adapted_layers, lora_target_layers, stores_weight_transposed

DEFAULT_RANK = 8
ADAPTER_NAME = "default"  # PEFT's name of the one adapter `add_lora` injects
# A checkpoint's PEFT adapter: a folder of its own, since transformers takes an `adapter_config.json` at a
# checkpoint's top for a PEFT checkpoint and would load the folder as one
ADAPTER_FOLDER = "adapter"


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
            # The paths of the linear layers found, not their names: PEFT 0.22 also reads a name as a parameter of a
            # fused mixture-of-experts module (Qwen2-MoE's `experts.down_proj`) and wraps that module, which the
            # plain-torch merge (`lora_dwatt`) does not know.
            target_modules=sorted(found),
            fan_in_fan_out=any(type(layer).__name__ == "Conv1D" for layer in found.values()),
        ),
        model.dwatt.backbone,
    )
    model.config.lora = record
    model.config.validate_lora()
    return record


def is_lora_parameter(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def save_adapter(model, folder: Path, base_model: str | None) -> bool:
    """The backbone's LoRA adapters saved into `folder` in PEFT's own format, `adapter_config.json` and
    `adapter_model.safetensors`: `PeftModel.from_pretrained(<the plain backbone>, folder)` adapts the plain backbone
    as this model's is. The adapters as `add_lora` put them there (a model in training), or as a head-only checkpoint
    brought them (`model.dwatt.lora`, merged into the backbone, kept beside it). `base_model`: how the adapter's config
    names the backbone. False, and nothing written, for a model without them (FE, FT, or a LoRA checkpoint saved
    merged)."""
    from peft import LoraConfig, get_peft_model_state_dict
    from safetensors.torch import save_file

    backbone, lora = model.dwatt.backbone, model.config.lora
    if adapted_layers(backbone):
        config = copy.deepcopy(backbone.peft_config[ADAPTER_NAME])
        config.target_modules = lora["targets"]  # the layers' names, as the adapter's users give them (not paths)
        state = get_peft_model_state_dict(backbone, adapter_name=ADAPTER_NAME)
    elif model.dwatt.lora is not None:
        layers = lora_target_layers(backbone, lora["targets"]).values()
        config = LoraConfig(
            r=lora["rank"],
            lora_alpha=lora["alpha"],
            lora_dropout=lora["dropout"],
            target_modules=lora["targets"],
            fan_in_fan_out=any(stores_weight_transposed(layer) for layer in layers),
        )
        state = {
            f"{key.replace('__', '.')}.lora_{part}.weight": getattr(update, f"lora_{part}")
            for key, update in model.dwatt.lora.updates.items()
            for part in "AB"
        }
    else:
        return False
    config.base_model_name_or_path, config.inference_mode = base_model, True
    config.save_pretrained(folder)
    # keys as a `PeftModel` wrapping the plain backbone saves them: `base_model.model.<the layer's path>...`
    tensors = {f"base_model.model.{key}": value.detach().contiguous() for key, value in state.items()}
    save_file(tensors, Path(folder) / "adapter_model.safetensors", metadata={"format": "pt"})
    return True


__all__ = ["ADAPTER_FOLDER", "DEFAULT_RANK", "add_lora", "default_targets", "is_lora_parameter", "save_adapter"]
