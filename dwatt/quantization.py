"""int8 inference on a CPU: the backbone's and the fusion's linear maps with int8 weights, activations quantized per
batch as they come (dynamic quantization), the task head left in fp32.

Of the ways measured on the project's 2-core CPU (`benchmarks/predict_speed.py`), PyTorch's dynamic quantization
(`torch.ao.quantization.quantize_dynamic`, the fbgemm/x86 int8 kernels) was the fastest in eager PyTorch: torchao's
int8 configurations ran slower than fp32 there without `torch.compile`. PyTorch marks its quantized tensors as
deprecated; the ONNX path (`dwatt export --quantize int8`, onnxruntime's int8 kernels) does not depend on them.
DWAtt's stacked value MLPs are batched matmuls over raw weights, not `nn.Linear`s: they stay fp32, as do GPT-2's
`Conv1D` projections.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

QUANTIZATIONS = ("int8",)


def quantize_int8(model: nn.Module) -> nn.Module:
    """`model` (a DWAtt task model, in place, put in eval mode) with dynamic int8 `nn.Linear`s in its backbone and
    fusion module (`model.dwatt`); its head stays fp32. For inference on a CPU only: the result cannot train."""
    if not hasattr(model, "dwatt"):
        raise ValueError(f"quantize_int8 takes a DWAtt task model, got {type(model).__name__}")
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 dynamic quantization runs on the CPU: move the model there first (model.cpu())")
    model.eval()
    with warnings.catch_warnings():  # PyTorch's note that its quantized tensor type is deprecated (see the docstring)
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*deprecated.*")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        torch.ao.quantization.quantize_dynamic(model.dwatt, {nn.Linear}, dtype=torch.qint8, inplace=True)
    return model


def quantize(model: nn.Module, kind: str | None) -> nn.Module:
    """`model` quantized as `kind` (`QUANTIZATIONS`), or as it is for None."""
    if kind is None:
        return model
    if kind != "int8":
        raise ValueError(f"--quantize: {kind!r} is not one of {', '.join(QUANTIZATIONS)}")
    return quantize_int8(model)


__all__ = ["QUANTIZATIONS", "quantize", "quantize_int8"]
