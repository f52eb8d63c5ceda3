"""int8 inference on a CPU: the backbone's and the fusion's linear maps with int8 weights (one scale per output
channel), activations quantized per batch as they come (dynamic quantization), the task head left in fp32.

The feed-forward up-projections (hidden -> intermediate size) stay fp32: their inputs carry a few outlier channels
that one activation scale per tensor cannot hold. On a MiniLM DWAtt tagger trained at N = 128 (CoNLL-03 test,
`benchmarks/int8_accuracy.py`) quantizing them too lost 1.2 F1 points (3.3 with one weight scale per tensor);
keeping them fp32 lost none, at about 1.4 times the all-int8 time.

Of the ways measured on the project's 2-core CPU (`benchmarks/quantization_speed.py`, `int8_accuracy.py`), PyTorch's
dynamic quantization (`torch.ao.quantization.quantize_dynamic`, the fbgemm/x86 int8 kernels) was the fastest in
PyTorch that kept the F1, ahead of torchao's int8 configurations (eager); onnxruntime's int8 graph
(`dwatt export --quantize int8`) is faster still and costs more F1. PyTorch marks its quantized tensors as
deprecated; the ONNX path does not depend on them.
DWAtt's stacked value MLPs are batched matmuls over raw weights, not `nn.Linear`s: they stay fp32, as do GPT-2's
`Conv1D` projections.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.ao.quantization import per_channel_dynamic_qconfig

QUANTIZATIONS = ("int8",)


def quantize_int8(model: nn.Module) -> nn.Module:
    """`model` (a DWAtt task model, in place, put in eval mode) with dynamic int8 `nn.Linear`s in its backbone and
    fusion module (`model.dwatt`), but for the feed-forward up-projections; its head stays fp32. For inference on a
    CPU only: the result cannot train."""
    if not hasattr(model, "dwatt"):
        raise ValueError(f"quantize_int8 takes a DWAtt task model, got {type(model).__name__}")
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 dynamic quantization runs on the CPU: move the model there first (model.cpu())")
    model.eval()
    encoder = model.config.encoder_config
    chosen = {name: per_channel_dynamic_qconfig for name, module in model.dwatt.named_modules()
              if isinstance(module, nn.Linear) and not is_up_projection(module, encoder)}
    with warnings.catch_warnings():  # PyTorch's note that its quantized tensor type is deprecated (see the docstring)
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*deprecated.*")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        torch.ao.quantization.quantize_dynamic(model.dwatt, chosen, dtype=torch.qint8, inplace=True)
    return model


def is_up_projection(layer: nn.Linear, encoder_config) -> bool:
    """A feed-forward up-projection of the backbone (hidden size -> intermediate size), which stays fp32."""
    return (layer.in_features, layer.out_features) == (encoder_config.hidden_size,
                                                       getattr(encoder_config, "intermediate_size", None))


def quantize(model: nn.Module, kind: str | None) -> nn.Module:
    """`model` quantized as `kind` (`QUANTIZATIONS`), or as it is for None."""
    if kind is None:
        return model
    if kind != "int8":
        raise ValueError(f"--quantize: {kind!r} is not one of {', '.join(QUANTIZATIONS)}")
    return quantize_int8(model)


__all__ = ["QUANTIZATIONS", "is_up_projection", "quantize", "quantize_int8"]
