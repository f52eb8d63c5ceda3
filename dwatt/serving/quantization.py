"""int8 inference on a CPU: the backbone's and the fusion's linear maps with int8 weights (one scale per output
channel), activations quantized per batch as they come (dynamic quantization), the task head left in fp32.

Activations get all 8 bits where this CPU's int8 kernels multiply them exactly (`full_range_activations_exact`: a
probe of the kernel itself; true with VNNI instructions, which some of the project's CPUs have and some lack).
PyTorch's own dynamic
`Linear` quantizes activations to 7 bits (`reduce_range=True`), because x86 kernels without VNNI add pairs of
products in 16 bits and would saturate on 8-bit ones. Where that is so, the feed-forward up-projections (hidden ->
intermediate size) stay fp32: their inputs carry a few outlier channels that 7 bits and one scale per tensor cannot
hold. What each way keeps of the fp32 scores is measured by `benchmarks/int8_accuracy.py`, how fast it runs against
torchao's int8 configurations and onnxruntime's int8 graph by `benchmarks/quantization_speed.py` and
`benchmarks/predict_speed.py` (their results under benchmarks/results): on a CPU without VNNI the ONNX export's int8
graph in onnxruntime (`dwatt export --quantize int8`, `dwatt.serving.export.quantize_onnx`) is the faster command
there. PyTorch marks its quantized tensors as deprecated; the ONNX path does not
depend on them.
DWAtt's stacked value MLPs are batched matmuls over raw weights, not `nn.Linear`s: they stay fp32, as do GPT-2's
`Conv1D` projections. A probe ensemble (`dwatt.serving.ensemble.AveragedHeads`) is quantized the same way: the backbone
its members share, once, and each member's fusion; their heads stay fp32.
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch import nn
from torch.ao.nn.quantized import dynamic as dynamic_quantized
from torch.ao.quantization import per_channel_dynamic_qconfig

from configuration_dwatt import is_decoder_only

from ..tasks import task_of_model
from .ensemble import AveragedHeads
from .schemes import QUANTIZATIONS

# PyTorch's dynamic int8 gives activations one scale per tensor, which a decoder LLM's outlier activations defeat
# (dwatt.serving.int8_graphs); the export's per-token graph keeps the tags.
DECODERS_REFUSED = (
    "int8 in PyTorch (one activation scale per tensor) loses a decoder LLM's answers: SmolLM2's "
    "layer-11 tagger kept 91.7% of words (benchmarks/results/int8_decoders_cpu.md); export the "
    "checkpoint with `dwatt export CHECKPOINT OUT --quantize int8` (per token, checked against fp32) "
    "and run `dwatt predict OUT --quantize int8`"
)


class FullRangeDynamicLinear(dynamic_quantized.Linear):
    """PyTorch's dynamic int8 `Linear` with activations quantized to all 8 bits (`reduce_range=False`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x, self._packed_params._packed_params, reduce_range=False).to(
            x.dtype
        )

    def _get_name(self) -> str:
        return "FullRangeDynamicQuantizedLinear"


@functools.cache
def full_range_activations_exact() -> bool:
    """Whether this CPU's dynamic int8 linear kernel multiplies 8-bit activations without saturating: a probe whose
    pairs of products (255 x -128, twice) overflow 16 bits, checked against the exact sum."""
    probe = nn.Linear(64, 4, bias=False)
    with torch.no_grad():
        probe.weight.fill_(-1.0)
    probe.qconfig = per_channel_dynamic_qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = FullRangeDynamicLinear.from_float(probe)
    out = quantized(torch.ones(2, 64))
    return bool(torch.allclose(out, torch.full_like(out, -64.0), rtol=0.02))


def quantized_parts(model: nn.Module) -> list[nn.Module]:
    """The parts of `model` whose linear maps int8 quantizes: a DWAtt task model's backbone and fusion (`model.dwatt`),
    or each member's of a probe ensemble (their shared backbone among them)."""

    if isinstance(model, AveragedHeads):
        return [head.dwatt for head in model.heads.heads.values()]
    if task_of_model(model) is not None:
        return [model.dwatt]
    raise ValueError(f"quantize_int8 takes a DWAtt task model or a probe ensemble, got {type(model).__name__}")


def quantize_int8(model: nn.Module, full_range: bool | None = None, allow_lossy: bool = False) -> nn.Module:
    """`model` (a DWAtt task model or a probe ensemble, in place, put in eval mode) with dynamic int8 `nn.Linear`s in
    its backbone and fusion (`quantized_parts`); its heads stay fp32. `full_range`: 8-bit activations on every linear
    map, or 7-bit ones with the feed-forward up-projections in fp32; by default the first where this CPU computes it
    exactly (see the module docstring). A decoder LLM is refused (`DECODERS_REFUSED`) unless `allow_lossy`. For
    inference on a CPU only: the result cannot train."""

    parts = quantized_parts(model)
    if is_decoder_only(model.config.encoder_config) and not allow_lossy:
        raise ValueError(DECODERS_REFUSED)
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 dynamic quantization runs on the CPU: move the model there first (model.cpu())")
    model.eval()
    if full_range is None:
        full_range = full_range_activations_exact()
    encoder = model.config.encoder_config
    mapping = {nn.Linear: FullRangeDynamicLinear if full_range else dynamic_quantized.Linear}
    for part in parts:  # a backbone shared by several parts is quantized with the first: its maps are no longer Linear
        chosen = {
            name: per_channel_dynamic_qconfig
            for name, module in part.named_modules()
            if isinstance(module, nn.Linear) and (full_range or not is_up_projection(module, encoder))
        }
        with (
            warnings.catch_warnings()
        ):  # PyTorch's note that its quantized tensor type is deprecated (see the docstring)
            warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*deprecated.*")
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            torch.ao.quantization.quantize_dynamic(part, chosen, dtype=torch.qint8, mapping=mapping, inplace=True)
    return model


def is_up_projection(layer: nn.Linear, encoder_config) -> bool:
    """A feed-forward up-projection of the backbone (hidden size -> intermediate size), which stays fp32 where
    activations get 7 bits."""
    return (layer.in_features, layer.out_features) == (
        encoder_config.hidden_size,
        getattr(encoder_config, "intermediate_size", None),
    )


def with_backbone_dtype(model: nn.Module, dtype: str) -> nn.Module:
    """`model` (a DWAtt task model or a probe ensemble, in place) with its backbone's floating-point weights in
    `dtype` (`"auto"`: as loaded), its fusion and heads as they are: they cast the features they read."""
    if dtype != "auto":
        for part in quantized_parts(model):
            part.backbone.to(getattr(torch, dtype))
    return model


def quantize(model: nn.Module, kind: str | None) -> nn.Module:
    """`model` quantized as `kind` (`QUANTIZATIONS`), or as it is for None."""
    if kind is None:
        return model
    if kind != "int8":
        raise ValueError(f"--quantize: {kind!r} is not one of {', '.join(QUANTIZATIONS)}")
    return quantize_int8(model)


__all__ = [
    "QUANTIZATIONS",
    "FullRangeDynamicLinear",
    "full_range_activations_exact",
    "is_up_projection",
    "quantize",
    "with_backbone_dtype",
    "quantize_int8",
    "quantized_parts",
]
