# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""LoRA for DWAtt's backbone in plain torch: which layers carry low-rank updates, the updates of a head-only
checkpoint (`LoRAUpdates`) and how they merge into the backbone's weights, so that no LoRA library is needed to load or
run a model (PEFT trains them; `dwatt.lora`).

Part of DWAtt's remote code: travels with every checkpoint beside `modeling_dwatt.py`; imports only torch and
transformers.
"""

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

try:
    from .configuration_dwatt import DWAttConfig
except ImportError:  # a top-level module of the installed project, not remote code
    # Nested, so that the import scan of older transformers (4.46: a regular expression that skips the body of a `try`,
    # not of its `except`) does not take these modules for packages the remote code needs.
    try:
        from configuration_dwatt import DWAttConfig
    except ImportError as error:
        raise ImportError(f"{__name__} needs the other *_dwatt.py files beside it") from error


def lora_target_layers(backbone: nn.Module, targets) -> dict[str, nn.Module]:
    """The backbone's layers that LoRA adapts: the linear maps (`nn.Linear`, GPT-2's `Conv1D`) named one of `targets`
    (the last part of their path), by path."""
    return {
        path: module
        for path, module in backbone.named_modules()
        if path.rsplit(".", 1)[-1] in targets and isinstance(module, (nn.Linear, Conv1D))
    }


def stores_weight_transposed(layer: nn.Module) -> bool:
    """Whether `layer` keeps its weight `(in, out)`: GPT-2's `Conv1D` does, `nn.Linear` keeps `(out, in)`. Read from
    the layer's class, never guessed from the shape, which cannot tell for a square layer (as PEFT's
    `fan_in_fan_out` is set from the class)."""
    return isinstance(layer, Conv1D)


def low_rank_delta(layer: nn.Module, lora_A: torch.Tensor, lora_B: torch.Tensor, scale: float) -> torch.Tensor:
    """`scale * B @ A` (A: rank x in, B: out x rank) in the layout of `layer.weight`: `(out, in)` for `nn.Linear`,
    `(in, out)` for GPT-2's `Conv1D`; computed in float32."""
    delta = scale * (lora_B.float() @ lora_A.float())
    return (delta.t() if stores_weight_transposed(layer) else delta).to(layer.weight.dtype)


def _lora_key(path: str) -> str:
    return path.replace(".", "__")


class LowRankUpdate(nn.Module):
    """One adapted layer's pair: `lora_A` (rank x in) and `lora_B` (out x rank)."""

    def __init__(self, in_features: int, out_features: int, rank: int):
        super().__init__()
        self.lora_A = nn.Parameter(torch.zeros(rank, in_features))
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank))


class LoRAUpdates(nn.Module):
    """
    The low-rank updates of a head-only LoRA checkpoint, one pair per adapted layer of the backbone (keyed by the
    layer's path, dots as `__`), held while the checkpoint loads and then merged into the backbone it fetches:
    `W + (alpha / rank) * B @ A`, in plain torch, so that no LoRA library is needed to load or run the model.
    """

    def __init__(self, config: DWAttConfig, backbone: nn.Module):
        super().__init__()
        lora = config.lora
        layers = lora_target_layers(backbone, lora["targets"])
        if not layers:
            raise ValueError(
                f"LoRA targets {lora['targets']} name no linear layer of the {config.encoder_config.model_type!r} backbone"
            )
        self.scale = lora["alpha"] / lora["rank"]
        self.updates = nn.ModuleDict(
            {_lora_key(path): LowRankUpdate(*_in_out(module), lora["rank"]) for path, module in layers.items()}
        )

    @torch.no_grad()
    def merge_into(self, backbone: nn.Module) -> None:
        for key, update in self.updates.items():
            layer = backbone.get_submodule(key.replace("__", "."))
            layer.weight += low_rank_delta(layer, update.lora_A, update.lora_B, self.scale)


def _in_out(layer: nn.Module) -> tuple[int, int]:
    """(in, out) features of a linear layer: `nn.Linear` stores its weight `(out, in)`, `Conv1D` `(in, out)`."""
    if isinstance(layer, nn.Linear):
        return layer.in_features, layer.out_features
    return tuple(layer.weight.shape)


def adapted_layers(backbone: nn.Module) -> dict[str, tuple[nn.Module, torch.Tensor, torch.Tensor]]:
    """The backbone's layers that carry a trainable low-rank adapter (PEFT's LoRA layers, as `dwatt` trains them),
    by path: `(base layer, A, B)`. Read by attribute, so that this file needs no LoRA library."""
    found = {}
    for path, module in backbone.named_modules():
        lora_A, lora_B = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
        if isinstance(lora_A, nn.ModuleDict) and isinstance(lora_B, nn.ModuleDict) and len(lora_A) == 1:
            adapter = next(iter(lora_A))
            found[path] = (module.base_layer, lora_A[adapter].weight, lora_B[adapter].weight)
    return found
