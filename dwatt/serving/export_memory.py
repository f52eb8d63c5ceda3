"""What `dwatt export` takes in memory: its estimate before it begins (`check_export_memory`, refusing an export
over `--max-memory` or the memory available), and letting go of PyTorch's weights once they are no longer needed."""

from __future__ import annotations

import gc

from torch import nn

from ..features.memory import gib, release_freed_memory

# A model whose weights take more than this in float32 has its graph written in a process of its own
# (`write_graph_apart`), so that the exporter's hold on them ends with that process.
APART_ABOVE = 1 << 30


# The export's peak anonymous memory as a multiple of the model's weights in float32, measured on a Qwen2.5-Coder-1.5B
# head cut at layer 12 (2.96 GiB of weights in float32; benchmarks/results/memory_Qwen2.5-Coder-1.5B-Instruct-q4.md,
# 3.79 GiB for fp32 and 7.83 GiB with --quantize int8, each with `EXPORT_MARGIN` beside): fp32, the graph written in a
# process of its own, then checked by onnxruntime; int8, the `smooth` scheme's rewrite of the graph (two copies of its
# weights) beside the int8 graph's session. A model written in this process (`APART_ABOVE`) adds PyTorch's copy,
# which the exporter keeps. Beside them, the process's own (torch, onnxruntime, the tokenizer): `EXPORT_MARGIN`.
EXPORT_PEAK = {False: 1.0, True: 2.35}
EXPORT_MARGIN = 1 << 30
# A stock export (`--format transformers`) holds the checkpoint's weights in float32 while it builds the stock model
# (whose random weights it then replaces by the checkpoint's, shared), writes them, lets them go and loads the folder
# back: about twice their size at its peak, beside `EXPORT_MARGIN`; measured on a Qwen2.5-Coder-1.5B tagger cut at
# layer 12 and read through the final norm: 6.30 GiB anonymous (benchmarks/results/memory_Qwen2.5-...).
STOCK_EXPORT_PEAK = 2.0


def float_bytes(model: nn.Module) -> int:
    """What `model`'s weights and buffers take in float32."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}.values()
    return 4 * sum(t.numel() for t in tensors)


def export_memory(model: nn.Module, quantize: str | None, stock: bool = False) -> int:
    """The memory, in bytes, that exporting `model` takes at its peak (`EXPORT_PEAK`, or `STOCK_EXPORT_PEAK` for a
    stock export), from its weights' size in float32."""
    weights = float_bytes(model)
    if stock:
        return int(STOCK_EXPORT_PEAK * weights) + EXPORT_MARGIN
    kept = weights if weights <= APART_ABOVE else 0
    return int(EXPORT_PEAK[quantize is not None] * weights) + kept + EXPORT_MARGIN


def check_export_memory(
    checkpoint, model: nn.Module, quantize: str | None, max_memory: int | None, stock: bool = False
) -> int:
    """Refuse (ValueError), before anything heavy runs, an export that would take more memory (`export_memory`) than
    `max_memory` (bytes) or, without one, than the system has available; returns the estimate."""
    import psutil

    need = export_memory(model, quantize, stock)
    what = f"exporting {checkpoint}{' with --quantize' if quantize else ''} takes about {gib(need)} of memory"
    if max_memory is not None and need > max_memory:
        raise ValueError(f"--max-memory {gib(max_memory)}: {what}; give at least {gib(need)}")
    available = psutil.virtual_memory().available
    if max_memory is None and need > available:
        raise ValueError(
            f"{what}, and {gib(available)} is available; free some, or export on a machine with more memory"
        )
    return need


def release_weights(model: nn.Module) -> None:
    """Let go of `model`'s weights (moved to the meta device: shapes and config kept, storage freed). Not after
    `torch.onnx.export` has run on it: the exporter keeps references to them that this cannot reach (a Qwen2.5-Coder-1.5B
    head's 3.4 GiB stayed), so a large checkpoint's graph is written in a process of its own (`write_graph_apart`)."""

    model.to("meta")
    gc.collect()
    release_freed_memory()


__all__ = [
    "APART_ABOVE",
    "EXPORT_MARGIN",
    "EXPORT_PEAK",
    "STOCK_EXPORT_PEAK",
    "check_export_memory",
    "export_memory",
    "float_bytes",
    "release_weights",
]
