"""A trained checkpoint as an ONNX graph for onnxruntime (`dwatt export CHECKPOINT OUT --format onnx`), and running one.

The model's forward pass is one graph (no Python branch on tensor values; `modeling_dwatt.traced`), exported by
PyTorch's `torch.export`-based ONNX exporter with the batch and sequence axes dynamic. The folder holds `model.onnx`
(and `model_int8.onnx` with `--quantize int8`: onnxruntime's dynamic int8 quantization of the linear maps), the
tokenizer, the model's `config.json`, and `dwatt_export.json`: the task, the labels, the graph's inputs and how far onnxruntime's logits were
from PyTorch's on a check batch when it was written. `dwatt predict EXPORT --runtime onnx` runs it through the same
code as the PyTorch model (`OnnxModel` is called like one), so the outputs line up the same way.

Needs the `export` extra: `pip install -e ".[export]"` (onnx, onnxscript, onnxruntime).
"""

from __future__ import annotations

import json
import logging
import warnings
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

EXPORT_CONFIG = "dwatt_export.json"
GRAPHS = {None: "model.onnx", "int8": "model_int8.onnx"}
# onnxruntime against PyTorch on the check batch, fp32: larger means the graph computes something else.
TOLERANCE = 1e-4
CHECK_TEXTS = ["Peter Blackburn rejects the [MASK] call in Brussels .", "EU [MASK] ."]


def _needs(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(f"ONNX export and runtime need {module}: pip install -e \".[export]\"") from None


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


def session_options(runtime):
    """onnxruntime's session options for dwatt: quiet, and its worker threads do not spin-wait between runs, which
    would take the cores from the tokenizer and the rest of the process (and from other processes)."""
    options = runtime.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def graph_inputs(model) -> list[str]:
    """The inputs an exported graph takes: token types only where the backbone reads them."""
    return ["input_ids", "attention_mask"] + (["token_type_ids"] if model.dwatt._takes_token_types else [])


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
    _needs("onnxscript")
    runtime = _needs("onnxruntime")
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


def export_onnx(checkpoint: str | Path, output: str | Path, quantize: str | None = None) -> dict:
    """Write `checkpoint` (a saved DWAtt task model, full or head-only) to `output` as an ONNX graph with its tokenizer
    and `dwatt_export.json`; with `quantize="int8"` also an int8 graph. Checks onnxruntime against PyTorch on a padded
    batch and refuses (ValueError) a graph whose logits differ by more than `TOLERANCE`. Returns the export config."""
    from .atomic import give_usual_modes, write_json_atomically
    from .checkpoints import load_checkpoint

    runtime = _needs("onnxruntime")
    if quantize not in GRAPHS:
        raise ValueError(f"--quantize: {quantize!r} is not one of int8")
    model, tokenizer, task = load_checkpoint(checkpoint)
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    inputs = graph_inputs(model)
    difference = write_onnx(model, check_batch(tokenizer, inputs), output / GRAPHS[None])
    if difference > TOLERANCE:
        (output / GRAPHS[None]).unlink()
        raise ValueError(f"the exported graph's logits differ from PyTorch's by {difference:.2e} (> {TOLERANCE}); not kept")
    graphs = {"fp32": GRAPHS[None]}
    if quantize == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with _quiet_exporter():
            quantize_dynamic(str(output / GRAPHS[None]), str(output / GRAPHS["int8"]), weight_type=QuantType.QInt8)
        graphs["int8"] = GRAPHS["int8"]
    tokenizer.save_pretrained(output)
    model.config.save_pretrained(output)  # the model's config (labels, fusion, backbone), which the tokenizer's loading reads
    config = {
        "format": "onnx",
        "task": task,
        "source": str(checkpoint),
        "architecture": type(model).__name__,
        "fusion": model.config.fusion,
        "id2label": {str(i): label for i, label in model.config.id2label.items()},
        "pooling": getattr(model.config, "pooling", None),
        "inputs": inputs,
        "graphs": graphs,
        "check": {"max_abs_logit_difference": difference, "tolerance": TOLERANCE},
        "torch": torch.__version__,
        "onnxruntime": runtime.__version__,
    }
    write_json_atomically(output / EXPORT_CONFIG, config)
    give_usual_modes(output)
    return config


def is_export(folder: str | Path) -> bool:
    return (Path(folder) / EXPORT_CONFIG).is_file()


class OnnxModel:
    """An exported graph run by onnxruntime, called like the PyTorch model by `dwatt.prediction` (`model(**batch)`
    returns an object with `.logits`; `model.config` has `id2label` and `num_labels`). Inputs the graph does not take
    (a tagger's `logits_mask`, which only saves work in PyTorch) are left out; the logits at the positions read are
    the same."""

    def __init__(self, folder: str | Path, quantize: str | None = None):
        runtime = _needs("onnxruntime")
        folder = Path(folder)
        self.export = json.loads((folder / EXPORT_CONFIG).read_text())
        wanted = "int8" if quantize == "int8" else "fp32"
        if wanted not in self.export["graphs"]:
            raise ValueError(f"{folder} has no int8 graph: export it with `dwatt export ... --quantize int8`")
        self.session = runtime.InferenceSession(str(folder / self.export["graphs"][wanted]), session_options(runtime),
                                                providers=["CPUExecutionProvider"])
        id2label = {int(i): label for i, label in self.export["id2label"].items()}
        self.config = SimpleNamespace(id2label=id2label, num_labels=len(id2label), pooling=self.export.get("pooling"))

    def eval(self):
        return self

    def __call__(self, **batch) -> SimpleNamespace:
        feeds = {}
        for name in self.export["inputs"]:
            tensor = batch.get(name)
            if tensor is None:  # a tokenizer without token types: zeros, as the model takes them
                tensor = torch.zeros_like(batch["input_ids"])
            feeds[name] = tensor.cpu().numpy().astype("int64")
        return SimpleNamespace(logits=torch.from_numpy(self.session.run(["logits"], feeds)[0]))


def load_export(folder: str | Path, quantize: str | None = None):
    """An export folder's runnable model, its tokenizer and its task, as `dwatt.checkpoints.load_checkpoint` returns
    a checkpoint's."""
    from .tokenization import load_tokenizer

    model = OnnxModel(folder, quantize)
    return model, load_tokenizer(folder), model.export["task"]


__all__ = ["EXPORT_CONFIG", "OnnxModel", "export_onnx", "graph_inputs", "is_export", "load_export", "write_onnx"]
