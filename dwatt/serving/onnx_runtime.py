"""Running an ONNX export (`dwatt export`) with onnxruntime, numpy and the export's tokenizer: neither torch nor
transformers' models are imported, so `dwatt predict EXPORT` starts in a fraction of a PyTorch checkpoint's time.

An export folder holds the graphs (`model.onnx`, and `model_int8.onnx` with `--quantize int8`), the tokenizer, the
model's `config.json` and `dwatt_export.json` (the task, the labels, the graph's inputs). `OnnxModel` is called like
the
PyTorch model by `dwatt.serving.prediction`, so the outputs line up the same way.

Needs the `export` extra: `pip install -e ".[export]"` (onnx, onnxscript, onnxruntime).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ..atomic import read_json, sha256_of
from ..data.targets import REGRESSION
from ..errors import first_line
from ..tasks import TASKS

EXPORT_CONFIG = "dwatt_export.json"
GRAPHS = {None: "model.onnx", "int8": "model_int8.onnx"}
FILES_KEY = "sha256"  # dwatt_export.json's record of every other file of the folder: name -> sha256
REQUIRED = ("task", "id2label", "inputs", "graphs", FILES_KEY)


def read_export_config(folder: Path) -> dict:
    """`dwatt_export.json`, checked: JSON, the keys a run needs, a known task, graph names that stay inside the
    folder. Every error names the file and the key."""
    path = folder / EXPORT_CONFIG
    export = read_json(path)
    if not isinstance(export, dict):
        raise ValueError(f"{path}: not a JSON object")
    missing = [key for key in REQUIRED if key not in export]
    if missing:
        raise ValueError(f"{path}: lacks {', '.join(map(repr, missing))}; export the checkpoint again")
    if export["task"] not in TASKS:
        raise ValueError(f"{path}: task {export['task']!r} is not one of {', '.join(TASKS)}")
    labels = export["id2label"]
    task = TASKS[export["task"]]
    least = 1 if task.problem_type == REGRESSION else 2  # a regression's one output; else two classes or more
    if not isinstance(labels, dict) or (task.labelled and len(labels) < least):
        raise ValueError(f"{path}: id2label needs at least {least} label(s), got {labels!r}")
    graphs = export["graphs"]
    if not isinstance(graphs, dict) or "fp32" not in graphs:
        raise ValueError(f"{path}: graphs needs an 'fp32' graph, got {graphs!r}")
    for kind, name in graphs.items():
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"{path}: graphs.{kind} is {name!r}; a graph is a file of the export's own folder")
    if not isinstance(export[FILES_KEY], dict) or "config.json" not in export[FILES_KEY]:
        raise ValueError(
            f"{path}: {FILES_KEY} must record every file of the export, config.json among them; "
            "export the checkpoint again"
        )
    return export


def check_labels(folder: Path, export: dict) -> None:
    """`dwatt_export.json`'s labels are the model's (config.json's `id2label`), in the same order: a label map edited
    in one of them would put every prediction under another tag."""
    config_path = folder / "config.json"
    config = read_json(config_path)
    theirs = config.get("id2label") if isinstance(config, dict) else None
    if TASKS[export["task"]].labelled and {str(k): v for k, v in (theirs or {}).items()} != export["id2label"]:
        raise ValueError(
            f"{folder / EXPORT_CONFIG}: id2label {export['id2label']} is not {config_path}'s "
            f"{theirs}; export the checkpoint again"
        )


def check_files(folder: Path, export: dict, skip: tuple[str, ...] = ()) -> None:
    """Every file `dwatt_export.json` records (but those whose names start with one of `skip`: a graph not run)
    is there with the recorded sha256: a folder whose graph, weights or tokenizer was replaced or cut is refused,
    naming the file (`read_export_config` requires the record)."""
    for name, digest in export[FILES_KEY].items():
        if Path(name).name != name or name.startswith(skip):
            continue
        path = folder / name
        if not path.is_file():
            raise ValueError(f"{path}: missing from the export; export the checkpoint again")
        if sha256_of(path) != digest:
            raise ValueError(
                f"{path}: not the file this export was written with (its sha256 differs); export the checkpoint again"
            )


def needs(module: str):
    """`module`, imported, or a ValueError that says which extra brings it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(f'ONNX export and runtime need {module}: pip install -e ".[export]"') from None


def session_options(runtime):
    """onnxruntime's session options for dwatt: quiet, and its worker threads do not spin-wait between runs, which
    would take the cores from the tokenizer and the rest of the process (and from other processes)."""
    options = runtime.SessionOptions()
    options.log_severity_level = 3
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:  # `--threads`, or the variable set for the whole machine
        options.intra_op_num_threads = int(threads)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def is_export(folder: str | Path) -> bool:
    return (Path(folder) / EXPORT_CONFIG).is_file()


class OnnxModel:
    """An exported graph run by onnxruntime, called like the PyTorch model by `dwatt.serving.prediction` on batches of arrays
    (`model(**batch)` returns an object with `.logits`, an array; `model.config` has `id2label` and `num_labels`).
    Inputs the graph does not take (a tagger's `logits_mask`, which only saves work in PyTorch) are left out; the
    logits at the positions read are the same."""

    takes_arrays = True

    def __init__(self, folder: str | Path, quantize: str | None = None):
        runtime = needs("onnxruntime")
        folder = Path(folder)
        self.export = read_export_config(folder)
        wanted = "int8" if quantize == "int8" else "fp32"
        if wanted not in self.export["graphs"]:
            raise ValueError(f"{folder} has no int8 graph: export it with `dwatt export ... --quantize int8`")
        graph = folder / self.export["graphs"][wanted]
        unused = tuple(name for kind, name in self.export["graphs"].items() if kind != wanted)
        check_files(folder, self.export, skip=unused)
        self._open(graph, runtime)
        check_labels(folder, self.export)

    @classmethod
    def of_graph(cls, graph: str | Path, export: dict) -> OnnxModel:
        """A graph not yet in an export folder (the export checks its int8 graph before writing the folder), run with
        `export`'s inputs and labels."""
        model = cls.__new__(cls)
        model.export = export
        model._open(Path(graph), needs("onnxruntime"))
        return model

    def close(self) -> None:
        """Let go of the session and its weights (`reopen` loads them again): the export holds one graph's weights at a
        time while it makes and checks int8 graphs of a large one."""
        self.session = None

    def reopen(self) -> None:
        if self.session is None:
            self._open(self.graph, needs("onnxruntime"))

    def _open(self, graph: Path, runtime) -> None:
        self.graph = graph
        try:
            self.session = runtime.InferenceSession(
                str(graph), session_options(runtime), providers=["CPUExecutionProvider"]
            )
        except Exception as error:  # onnxruntime's own error types (InvalidProtobuf, NoSuchFile, Fail) share no base
            raise ValueError(
                f"{graph}: onnxruntime cannot load it ({first_line(error)[:200]}); export the checkpoint again"
            ) from None
        id2label = {int(i): label for i, label in self.export["id2label"].items()}
        self.config = SimpleNamespace(
            id2label=id2label,
            num_labels=len(id2label),
            pooling=self.export.get("pooling"),
            word_readout=self.export.get("word_readout", "first"),  # exports made before readouts read the first
            # what a text task's logits say (multi-label, regression), from the task the export records
            problem_type=getattr(TASKS.get(self.export.get("task")), "problem_type", None),
        )
        self._check_outputs(graph)

    def _check_outputs(self, graph: Path) -> None:
        """The graph's logits have the task's rank and, for a tagger or classifier, one score per label of the export's
        `id2label`."""
        [logits] = [output for output in self.session.get_outputs() if output.name == "logits"] or [None]
        if logits is None:
            raise ValueError(f"{graph}: the graph has no 'logits' output")
        task, shape = self.export["task"], logits.shape
        if len(shape) != TASKS[task].logits_rank:
            raise ValueError(
                f"{graph}: logits of shape {shape} are not a {task} model's; {EXPORT_CONFIG} says task {task!r}"
            )
        if TASKS[task].labelled and isinstance(shape[-1], int) and shape[-1] != self.config.num_labels:
            raise ValueError(
                f"{graph}: the graph scores {shape[-1]} labels, {EXPORT_CONFIG}'s id2label has "
                f"{self.config.num_labels}"
            )

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
    from ..tokenization import load_saved_tokenizer

    model = OnnxModel(folder, quantize)
    try:
        tokenizer = load_saved_tokenizer(folder, model.export["inputs"])
    except (OSError, ValueError) as error:
        raise ValueError(f"{folder}: its tokenizer does not load ({first_line(error)})") from None
    return model, tokenizer, model.export["task"]


__all__ = [
    "EXPORT_CONFIG",
    "FILES_KEY",
    "GRAPHS",
    "OnnxModel",
    "check_files",
    "check_labels",
    "is_export",
    "load_export",
    "needs",
    "read_export_config",
    "session_options",
]
