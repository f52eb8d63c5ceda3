"""Running an ONNX export (`dwatt export`) with onnxruntime, numpy and the export's tokenizer: neither torch nor
transformers' models are imported, so `dwatt predict EXPORT` starts in a fraction of a PyTorch checkpoint's time.

An export folder holds the graphs (`model.onnx`, and `model_int8.onnx` with `--quantize int8`), the tokenizer, the
model's `config.json` and `dwatt_export.json` (the task, the labels, the graph's inputs). `OnnxModel` is called like the
PyTorch model by `dwatt.prediction`, so the outputs line up the same way.

Needs the `export` extra: `pip install -e ".[export]"` (onnx, onnxscript, onnxruntime).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

EXPORT_CONFIG = "dwatt_export.json"
GRAPHS = {None: "model.onnx", "int8": "model_int8.onnx"}


def needs(module: str):
    """`module`, imported, or a ValueError that says which extra brings it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(f"ONNX export and runtime need {module}: pip install -e \".[export]\"") from None


def session_options(runtime):
    """onnxruntime's session options for dwatt: quiet, and its worker threads do not spin-wait between runs, which
    would take the cores from the tokenizer and the rest of the process (and from other processes)."""
    options = runtime.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def is_export(folder: str | Path) -> bool:
    return (Path(folder) / EXPORT_CONFIG).is_file()


class OnnxModel:
    """An exported graph run by onnxruntime, called like the PyTorch model by `dwatt.prediction` on batches of arrays
    (`model(**batch)` returns an object with `.logits`, an array; `model.config` has `id2label` and `num_labels`).
    Inputs the graph does not take (a tagger's `logits_mask`, which only saves work in PyTorch) are left out; the
    logits at the positions read are the same."""

    takes_arrays = True

    def __init__(self, folder: str | Path, quantize: str | None = None):
        runtime = needs("onnxruntime")
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

    def __call__(self, **batch: np.ndarray) -> SimpleNamespace:
        feeds = {}
        for name in self.export["inputs"]:
            array = batch.get(name)
            if array is None:  # a tokenizer without token types: zeros, as the model takes them
                array = np.zeros_like(batch["input_ids"])
            feeds[name] = np.asarray(array, dtype=np.int64)
        return SimpleNamespace(logits=self.session.run(["logits"], feeds)[0])


def load_export(folder: str | Path, quantize: str | None = None):
    """An export folder's runnable model, its tokenizer and its task, as `dwatt.checkpoints.load_checkpoint` returns
    a checkpoint's."""
    from .tokenization import load_saved_tokenizer

    model = OnnxModel(folder, quantize)
    return model, load_saved_tokenizer(folder, model.export["inputs"]), model.export["task"]


__all__ = ["EXPORT_CONFIG", "GRAPHS", "OnnxModel", "is_export", "load_export", "needs", "session_options"]
