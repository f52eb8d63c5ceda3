"""A trained checkpoint as an ONNX graph for onnxruntime (`dwatt export CHECKPOINT OUT --format onnx`); running one is
`dwatt.serving.onnx_runtime`'s.

The model's forward pass is one graph (no Python branch on tensor values; `modeling_dwatt.traced`), exported by
PyTorch's `torch.export`-based ONNX exporter with the batch and sequence axes dynamic. The folder holds `model.onnx`
(and `model_int8.onnx` with `--quantize int8`: onnxruntime's dynamic int8 quantization of the linear maps,
`quantize_onnx`), the tokenizer, the model's `config.json`, and `dwatt_export.json`: the task, the labels, the graph's
inputs, how far onnxruntime's logits were from PyTorch's on a check batch when it was written, and the sha256 of every
other file, so that a folder whose graph or tokenizer is not the one exported with it is refused on load. `dwatt predict
EXPORT` runs it with onnxruntime (`dwatt.serving.onnx_runtime.OnnxModel`), through the same code as the PyTorch model, so the
outputs line up the same way.

Needs the `export` extra: `pip install -e ".[export]"` (onnx, onnxscript, onnxruntime).
"""

from __future__ import annotations

import logging
import math
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from ..portable import portable_path
from .onnx_runtime import EXPORT_CONFIG, FILES_KEY, GRAPHS, is_export, needs, session_options


# onnxruntime against PyTorch on the check batch, fp32: larger means the graph computes something else.
TOLERANCE = 1e-4
CHECK_TEXTS = ["Peter Blackburn rejects the [MASK] call in Brussels .", "EU [MASK] ."]


class _LogitsOnly(nn.Module):
    """The checkpoint's forward pass with plain tensor inputs and the logits as the one output."""

    def __init__(self, model: nn.Module, inputs: list[str]):
        super().__init__()
        self.model, self.inputs = model, inputs

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        return self.model(**{name: given[name] for name in self.inputs}).logits


@contextmanager
def _quiet_exporter():
    """The exporter's notes that say nothing about this graph (torchvision's missing operators, deprecations,
    axis names merged), and onnxruntime's advice to pre-process before quantizing, kept off the console."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch._export", "root")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def graph_inputs(model) -> list[str]:
    """The inputs an exported graph takes: token types only where the backbone reads them."""
    from .ensemble import AveragedHeads

    takes_token_types = model.takes_token_types if isinstance(model, AveragedHeads) else model.dwatt.takes_token_types
    return ["input_ids", "attention_mask"] + (["token_type_ids"] if takes_token_types else [])


def check_batch(tokenizer, inputs: list[str]) -> dict[str, torch.Tensor]:
    """Two texts of different lengths, padded: a batch that exercises the padding."""
    texts = [text.replace("[MASK]", tokenizer.mask_token or "the") for text in CHECK_TEXTS]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    batch.setdefault("token_type_ids", torch.zeros_like(batch["input_ids"]))
    return {name: batch[name] for name in inputs}


def write_onnx(model: nn.Module, batch: dict[str, torch.Tensor], path: str | Path) -> float:
    """`model`'s forward pass (inputs: `batch`'s keys, in `graph_inputs` order; output: `logits`) as an ONNX graph
    at `path`, batch and sequence axes dynamic. Returns the largest difference between onnxruntime's logits and
    PyTorch's on `batch`."""
    needs("onnxscript")
    runtime = needs("onnxruntime")
    inputs = list(batch)
    wrapped = _LogitsOnly(model, inputs).eval()
    axes = {name: {0: "batch", 1: "sequence"} for name in inputs}
    with torch.no_grad(), _quiet_exporter():
        expected = wrapped(*batch.values())
        torch.onnx.export(wrapped, tuple(batch.values()), str(path), dynamo=True, input_names=inputs,
                          output_names=["logits"], dynamic_shapes=axes, optimize=True, verbose=False)
    session = runtime.InferenceSession(str(path), session_options(runtime), providers=["CPUExecutionProvider"])
    got = session.run(None, {name: tensor.numpy() for name, tensor in batch.items()})[0]
    return float((torch.from_numpy(got) - expected).abs().max())


def quantize_onnx(source: str | Path, target: str | Path) -> None:
    """onnxruntime's dynamic int8 quantization of the graph at `source`, written to `target`: int8 weights with one
    scale per output channel (one per tensor lost 2.2 F1 on a MiniLM tagger, and 7.4 on an MPNet one:
    benchmarks/int8_accuracy.py), activations quantized per batch. Matrix products whose weight is a stack of matrices
    (DWAtt's value MLPs, one per layer) stay fp32, as in PyTorch's int8 path: onnxruntime's integer product takes
    per-channel scales on matrices only."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source), load_external_data=False).graph
    ranks = {tensor.name: len(tensor.dims) for tensor in graph.initializer}
    stacked = [node.name for node in graph.node if node.op_type == "MatMul" and ranks.get(node.input[1], 2) > 2]
    with _quiet_exporter():
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True,
                         nodes_to_exclude=stacked)


def export_onnx(checkpoint: str | Path, output: str | Path, quantize: str | None = None) -> dict:
    """Write `checkpoint` (a saved DWAtt task model, full or head-only, or a probe ensemble's folder: one graph, its
    logits the ensemble's) to `output` as an ONNX graph with its tokenizer and `dwatt_export.json`; with
    `quantize="int8"` also an int8 graph. Checks onnxruntime against PyTorch on a padded
    batch and refuses (ValueError) a graph whose logits differ by more than `TOLERANCE` or are not finite. The export is
    written into a scratch folder beside `output` and swapped in whole when it is complete (`replace_folder`): a
    re-export that fails or is killed leaves the earlier export as it was, never a mix of the two. `output` must be
    new, empty or an earlier export. Returns the export config, which records every file's sha256 (`FILES_KEY`),
    checked when the export is loaded."""
    from ..atomic import failed_write, replace_folder, scratch_folder
    from .ensemble import load_checkpoint_or_ensemble

    runtime = needs("onnxruntime")
    if quantize not in GRAPHS:
        raise ValueError(f"--quantize: {quantize!r} is not one of int8")
    output = Path(output)
    if output.exists() and not (output.is_dir() and (is_export(output) or not any(output.iterdir()))):
        raise ValueError(f"{output}: not an export folder (no {EXPORT_CONFIG}), and exporting would replace it; "
                         "give a new or empty folder")
    model, tokenizer, task = load_checkpoint_or_ensemble(checkpoint)
    model.float()  # a backbone kept in bf16 or fp16 as it was saved: onnxruntime's CPU kernels want fp32 (Elu has no bf16)
    with scratch_folder(output) as staging:
        try:
            config = _write_export(model, tokenizer, task, checkpoint, staging, quantize, runtime)
        except OSError as error:
            raise failed_write(error, output, "the export") from None
        replace_folder(staging, output)
    return config


def _write_export(model, tokenizer, task: str, checkpoint, staging: Path, quantize: str | None, runtime) -> dict:
    """The export's files, written into `staging`; returns its config (`export_onnx`)."""
    from ..atomic import give_usual_modes, sha256_of, write_json_atomically
    from .ensemble import AveragedHeads

    inputs = graph_inputs(model)
    difference = write_onnx(model, check_batch(tokenizer, inputs), staging / GRAPHS[None])
    if not math.isfinite(difference):
        raise ValueError(f"{checkpoint}: its logits on the check batch are not finite (the weights hold NaN or inf, "
                         "as after training at too large a learning rate); nothing exported")
    if difference > TOLERANCE:
        raise ValueError(f"the exported graph's logits differ from PyTorch's by {difference:.2e} (> {TOLERANCE}); not kept")
    graphs = {"fp32": GRAPHS[None]}
    if quantize == "int8":
        quantize_onnx(staging / GRAPHS[None], staging / GRAPHS["int8"])
        graphs["int8"] = GRAPHS["int8"]
    tokenizer.save_pretrained(staging)
    model.config.save_pretrained(staging)  # the model's config (labels, fusion, backbone), which the tokenizer's loading reads
    config = {
        "format": "onnx",
        "task": task,
        "source": portable_path(checkpoint),
        "architecture": type(model).__name__,
        "fusion": model.config.fusion,
        "id2label": {str(i): label for i, label in model.config.id2label.items()},
        "pooling": getattr(model.config, "pooling", None),
        # a probe ensemble's members (relative to its folder) and how they were chosen; config.json is its first's
        **({"ensemble": model.manifest} if isinstance(model, AveragedHeads) else {}),
        "inputs": inputs,
        "graphs": graphs,
        "check": {"max_abs_logit_difference": difference, "tolerance": TOLERANCE},
        "torch": torch.__version__,
        "onnxruntime": runtime.__version__,
        FILES_KEY: {path.name: sha256_of(path) for path in sorted(staging.iterdir()) if path.is_file()},
    }
    write_json_atomically(staging / EXPORT_CONFIG, config)
    give_usual_modes(staging)
    return config


__all__ = ["export_onnx", "graph_inputs", "quantize_onnx", "write_onnx"]
