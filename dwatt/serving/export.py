"""A trained checkpoint as an ONNX graph for onnxruntime (`dwatt export CHECKPOINT OUT --format onnx`); running one is
`dwatt.serving.onnx_runtime`'s.

The model's forward pass is one graph (no Python branch on tensor values; `modeling_dwatt.traced`), exported by
PyTorch's `torch.export`-based ONNX exporter with the batch and sequence axes dynamic. The folder holds `model.onnx`
(and `model_int8.onnx` with `--quantize int8`: onnxruntime's dynamic int8 quantization of the linear maps,
`quantize_onnx`), the tokenizer, the model's `config.json`, and `dwatt_export.json`: the task, the labels, the graph's
inputs, how far onnxruntime's logits were from PyTorch's on a check batch when it was written, and the sha256 of every
other file, so that a folder whose graph or tokenizer is not the one exported with it is refused on load. `dwatt
predict
EXPORT` runs it with onnxruntime (`dwatt.serving.onnx_runtime.OnnxModel`), through the same code as the PyTorch model,
so the
outputs line up the same way.

Needs the `export` extra: `pip install -e ".[export]"` (onnx, onnxscript, onnxruntime).
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import platform
import shutil
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from ..atomic import failed_write, give_usual_modes, replace_folder, scratch_folder, sha256_of, write_json_atomically
from ..portable import portable_path
from ..tokenization import save_tokenizer
from .ensemble import AveragedHeads, load_checkpoint_or_ensemble
from .export_memory import APART_ABOVE, check_export_memory, float_bytes, release_weights
from .int8_graphs import (
    AGREEMENT_THRESHOLD,
    INT8_SCHEMES,
    agreement,
    answers,
    calibrated_smooth_graph,
    calibration_sample,
    quantize_dynamic_graph,
    quantize_weights_graph,
)
from .onnx_runtime import EXPORT_CONFIG, FILES_KEY, GRAPHS, OnnxModel, is_export, needs, session_options
from .prediction import word_readout_of
from .schemes import EXPORT_QUANTIZATIONS, schemes_for

# onnxruntime against PyTorch on the check batch, fp32, relative to the largest logit (at least 1): larger means the
# graph computes something else. (Absolute, a head on Qwen2.5-Coder-1.5B's raw layer 12, whose logits on the check
# batch reach 1466, differed by 3e-4: the order of fp32 sums.)
TOLERANCE = 1e-4
CHECK_TEXTS = ["Peter Blackburn rejects the [MASK] call in Brussels .", "EU [MASK] ."]


class _LogitsOnly(nn.Module):
    """The checkpoint's forward pass with plain tensor inputs and the logits as the one output."""

    def __init__(self, model: nn.Module, inputs: list[str]):
        super().__init__()
        self.model, self.inputs = model, inputs

    def forward(self, input_ids, attention_mask, token_type_ids=None, word_ids=None):
        given = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "token_type_ids": token_type_ids,
            "word_ids": word_ids,
        }
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
    """The inputs an exported graph takes: token types only where the backbone reads them, each token's word where
    the tagger's word readout pools sub-tokens (`DWAttConfig.word_readout`)."""

    takes_token_types = (
        model.takes_token_types if isinstance(model, AveragedHeads) else model.dwatt.backbone_runner.takes_token_types
    )
    token_types = ["token_type_ids"] if takes_token_types else []
    return ["input_ids", "attention_mask", *token_types] + (
        ["word_ids"] if word_readout_of(model.config) != "first" else []
    )


def check_batch(tokenizer, inputs: list[str]) -> dict[str, torch.Tensor]:
    """Two texts of different lengths, padded: a batch that exercises the padding (and, where the graph takes them,
    each token's word, -1 for special tokens and padding)."""
    texts = [text.replace("[MASK]", tokenizer.mask_token or "the") for text in CHECK_TEXTS]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    batch.setdefault("token_type_ids", torch.zeros_like(batch["input_ids"]))
    if "word_ids" in inputs:
        words = [[-1 if word is None else word for word in batch.word_ids(row)] for row in range(len(texts))]
        batch["word_ids"] = torch.tensor(words)
    return {name: batch[name] for name in inputs}


def write_graph(model: nn.Module, batch: dict[str, torch.Tensor], path: str | Path) -> None:
    """`model`'s forward pass (inputs: `batch`'s keys, in `graph_inputs` order; output: `logits`) as an ONNX graph
    at `path`, batch and sequence axes dynamic (PyTorch's `torch.export`-based exporter)."""
    needs("onnxscript")
    inputs = list(batch)
    axes = {name: {0: "batch", 1: "sequence"} for name in inputs}
    with torch.no_grad(), _quiet_exporter():
        torch.onnx.export(
            _LogitsOnly(model, inputs).eval(),
            (),
            str(path),
            kwargs=dict(batch),
            dynamo=True,
            input_names=inputs,
            output_names=["logits"],
            dynamic_shapes=axes,
            optimize=True,
            verbose=False,
        )


def logits_of(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """PyTorch's logits on `batch`, as the graph computes them."""
    with torch.no_grad():
        return _LogitsOnly(model, list(batch)).eval()(**batch)


def check_graph(path: str | Path, batch: dict[str, torch.Tensor], expected: torch.Tensor) -> tuple[float, float]:
    """onnxruntime's logits of the graph at `path` on `batch` against PyTorch's (`expected`): the largest difference,
    and the largest of PyTorch's logits in magnitude."""
    runtime = needs("onnxruntime")
    session = runtime.InferenceSession(str(path), session_options(runtime), providers=["CPUExecutionProvider"])
    got = session.run(None, {name: tensor.numpy() for name, tensor in batch.items()})[0]
    return float((torch.from_numpy(got) - expected).abs().max()), float(expected.abs().max())


def write_onnx(model: nn.Module, batch: dict[str, torch.Tensor], path: str | Path) -> tuple[float, float]:
    """`write_graph` then `check_graph` against `model`'s own logits, in this process."""
    expected = logits_of(model, batch)
    write_graph(model, batch, path)
    return check_graph(path, batch, expected)


def _write_checkpoint_graph(checkpoint: str, batch: dict[str, torch.Tensor], path: str) -> None:

    model = load_checkpoint_or_ensemble(checkpoint)[0]
    write_graph(model.float(), batch, path)


def write_graph_apart(checkpoint, batch: dict[str, torch.Tensor], path: str | Path) -> None:
    """`write_graph` of `checkpoint`'s model, loaded again in a process of its own (spawned), which ends once the graph
    is written: the memory the exporter held goes with it."""

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as apart:
        apart.submit(_write_checkpoint_graph, str(checkpoint), batch, str(path)).result()


def quantize_onnx(source: Path, target: Path, scheme: str, fp32, answer, agrees=None) -> dict:
    """The int8 graph of the fp32 graph at `source` (its `OnnxModel`: `fp32`), written to `target` by `scheme`
    (`dwatt.serving.int8_graphs`): `dynamic`, onnxruntime's dynamic int8 (one scale per weight channel, where one per
    tensor loses F1 (benchmarks/int8_accuracy.py); activations one scale per batch), `weights`, onnxruntime's `MatMulNBits` (weights per block, int8 arithmetic), or `smooth`, calibrated
    on the sample that `answer(model)` runs (activations one scale per token, smoothed; the few products it would
    lose most on stay fp32, more of them while `agrees(graph path)` is under the threshold). Returns what the scheme
    chose on this machine: what `smooth` left fp32, whether `dynamic` took 7-bit weights (`{}` for `weights`)."""

    with _quiet_exporter():
        if scheme == "smooth":
            return calibrated_smooth_graph(source, target, fp32, answer, agrees)
        if scheme == "dynamic":
            return quantize_dynamic_graph(source, target)
        quantize_weights_graph(source, target)
        return {}


def check_int8(
    checkpoint,
    task: str,
    tokenizer,
    staging: Path,
    schemes: tuple[str, ...],
    export: dict,
    calibration,
    allow_lossy: bool,
) -> dict:
    """Write the int8 graph of each of `schemes` (`quantize_onnx`), measure how often it gives the fp32 graph's answer
    on the calibration sample (`dwatt.serving.int8_graphs.agreement`) and its time there against the fp32 graph's on
    this machine (`time_graphs`, the two taking turns; one int8 session open at a time), and keep, as `GRAPHS["int8"]`, the fastest of those at `AGREEMENT_THRESHOLD` or
    above. None there: refused (ValueError), unless `allow_lossy`, which keeps the one that agrees most. Returns the
    record `dwatt_export.json` keeps: the chosen scheme's figures, every candidate's, and the CPU's capabilities."""

    sample, described = calibration_sample(task, calibration)
    fp32 = OnnxModel.of_graph(staging / GRAPHS[None], export)

    def answer(model):
        return answers(task, model, tokenizer, sample)

    reference = answer(fp32)

    measured: dict[Path, tuple] = {}  # a graph file as written (time, size) -> its agreement: each measured once

    def measure(path: Path) -> dict:
        status = path.stat()
        written = status.st_mtime_ns, status.st_size
        if measured.get(path, (None,))[0] != written:
            graph = OnnxModel.of_graph(path, export)
            try:
                measured[path] = written, agreement(task, reference, answer(graph))
            finally:
                graph.close()
        return measured[path][1]

    def agrees(path: Path) -> float:
        return measure(path)["agreement"]

    candidates = []
    for scheme in schemes:
        folder = staging / f".int8-{scheme}"  # a graph over 2 GiB keeps its weights beside it, by its file name
        folder.mkdir()
        # the fp32 session is let go while a scheme reads and rewrites the graph (`smooth` runs a copy of its own and
        # reads only `fp32.config`), then opened again to time the int8 graph against: one graph's weights held at a
        # time besides the int8 graph's
        fp32.close()
        left_fp32 = quantize_onnx(staging / GRAPHS[None], folder / GRAPHS["int8"], scheme, fp32, answer, agrees)
        agreed = measure(folder / GRAPHS["int8"])  # the graph smooth kept was measured there already
        graph = OnnxModel.of_graph(folder / GRAPHS["int8"], export)
        fp32.reopen()
        seconds = time_graphs({"fp32": fp32, scheme: graph}, answer)
        del graph
        candidates.append(
            {
                "scheme": scheme,
                **agreed,
                **left_fp32,
                "seconds": seconds[scheme],
                "fp32_seconds": seconds["fp32"],  # in the same rounds: the ratio is paired
                "time_vs_fp32": seconds[scheme] / seconds["fp32"],
            }
        )
    keeping = [candidate for candidate in candidates if candidate["agreement"] >= AGREEMENT_THRESHOLD]
    if not keeping and not allow_lossy:
        tried = ", ".join(f"{c['scheme']} {100 * c['agreement']:.1f}%" for c in candidates)
        others = " or ".join(f"--quantize int8-{other}" for other in INT8_SCHEMES if other not in schemes)
        unit = candidates[0]["unit"]
        raise ValueError(
            f"{checkpoint}: its int8 graph{'s' * (len(schemes) > 1)} ({tried}) give{'s' * (len(schemes) == 1)} "
            f"under {100 * AGREEMENT_THRESHOLD:.0f}% of {unit} the fp32 graph's answer on {described}; nothing "
            f"exported: {'try ' + others + ', ' if others else ''}export fp32 alone (no --quantize), or keep it "
            "with --allow-lossy"
        )
    chosen = (
        min(keeping, key=lambda c: c["time_vs_fp32"]) if keeping else max(candidates, key=lambda c: c["agreement"])
    )
    for path in (staging / f".int8-{chosen['scheme']}").iterdir():
        path.rename(staging / path.name)
    for scheme in schemes:
        shutil.rmtree(staging / f".int8-{scheme}")
    return chosen | {
        "calibration": described,
        "threshold": AGREEMENT_THRESHOLD,
        "allow_lossy": allow_lossy,
        "candidates": candidates,
        "cpu": cpu_capabilities(),
    }


CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16")
"""The CPU features that int8 kernels' speed turns on (VNNI's int8 dot products, AMX's int8 tiles)."""


def cpu_capabilities() -> dict:
    """What the CPU the export ran on offers int8 kernels: PyTorch's reading of its vector width, which of `CPU_FLAGS`
    it has (Linux's /proc/cpuinfo; none listed elsewhere) and its model name."""

    flags: set[str] = set()
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags" and not flags:
                flags = set(value.split())
            elif key.strip() == "model name":
                model = value.strip()
    return {
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "flags": [flag for flag in CPU_FLAGS if flag in flags],
        "model": model,
    }


TIMING_ROUNDS = 3


def time_graphs(graphs: dict, run: Callable[[object], object], rounds: int = TIMING_ROUNDS) -> dict[str, float]:
    """Each graph's time to run `run` over the calibration sample on this CPU: the fastest of `rounds` rounds, the
    graphs taking turns within each round, so that a busy moment of a shared CPU falls on all of them alike."""

    best = dict.fromkeys(graphs, math.inf)
    for _ in range(rounds):
        for name, graph in graphs.items():
            start = time.perf_counter()
            run(graph)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def export_onnx(
    checkpoint: str | Path,
    output: str | Path,
    quantize: str | None = None,
    calibration: str | Path | None = None,
    allow_lossy: bool = False,
    max_memory: int | None = None,
) -> dict:
    """Write `checkpoint` (a saved DWAtt task model, full or head-only, or a probe ensemble's folder: one graph, its
    logits the ensemble's) to `output` as an ONNX graph with its tokenizer and `dwatt_export.json`; with `quantize`
    (`EXPORT_QUANTIZATIONS`: `dwatt.serving.int8_graphs`) also an int8 graph, checked against the fp32 graph on
    `calibration` (`check_int8`: refused below 98% agreement unless `allow_lossy`). Refused before it begins where it
    would take more memory than `max_memory` (bytes), or than is available (`check_export_memory`); a large model's
    graph is written apart (`write_graph_apart`), and onnxruntime holds one graph's weights at a time beside an int8
    graph's. Checks onnxruntime against PyTorch on a padded batch and refuses (ValueError) a graph whose logits differ
    by more than `TOLERANCE` of the largest logit or are not finite. The export is written into a scratch folder
    beside `output` and swapped in whole when it is complete (`replace_folder`): a re-export that fails or is killed
    leaves the earlier export as it was, never a mix of the two. `output` must be new, empty or an earlier export.
    Returns the export config, which records every file's sha256 (`FILES_KEY`), checked when the export is loaded."""

    runtime = needs("onnxruntime")
    if quantize is not None and quantize not in EXPORT_QUANTIZATIONS:
        raise ValueError(f"--quantize: {quantize!r} is not one of {', '.join(EXPORT_QUANTIZATIONS)}")
    if calibration is not None and not Path(calibration).is_file():
        raise ValueError(
            f"--calibration {calibration}: no such file (one input a line, as dwatt predict --file reads)"
        )
    output = Path(output)
    if output.exists() and not (output.is_dir() and (is_export(output) or not any(output.iterdir()))):
        raise ValueError(
            f"{output}: not an export folder (no {EXPORT_CONFIG}), and exporting would replace it; "
            "give a new or empty folder"
        )
    model, tokenizer, task = load_checkpoint_or_ensemble(checkpoint)
    check_export_memory(checkpoint, model, quantize, max_memory)
    model.float()  # a backbone kept in bf16 or fp16 as it was saved: onnxruntime's CPU kernels want fp32 (Elu has no bf16)
    with scratch_folder(output) as staging:
        try:
            config = _write_export(
                model, tokenizer, task, checkpoint, staging, quantize, runtime, calibration, allow_lossy
            )
        except OSError as error:
            raise failed_write(error, output, "the export") from None
        replace_folder(staging, output)
    return config


def _write_export(
    model,
    tokenizer,
    task: str,
    checkpoint,
    staging: Path,
    quantize: str | None,
    runtime,
    calibration=None,
    allow_lossy: bool = False,
) -> dict:
    """The export's files, written into `staging`; returns its config (`export_onnx`)."""

    inputs = graph_inputs(model)
    batch, graph = check_batch(tokenizer, inputs), staging / GRAPHS[None]
    expected = logits_of(model, batch)
    if float_bytes(model) > APART_ABOVE:  # PyTorch's weights let go before onnxruntime loads the graph's
        release_weights(model)
        write_graph_apart(checkpoint, batch, graph)
    else:
        write_graph(model, batch, graph)
    difference, largest = check_graph(graph, batch, expected)
    if not (math.isfinite(difference) and math.isfinite(largest)):
        raise ValueError(
            f"{checkpoint}: its logits on the check batch are not finite (the weights hold NaN or inf, "
            "as after training at too large a learning rate); nothing exported"
        )
    tolerance = TOLERANCE * max(1.0, largest)
    if difference > tolerance:
        raise ValueError(
            f"the exported graph's logits differ from PyTorch's by {difference:.2e} (> {tolerance:.2e}: "
            f"{TOLERANCE} of the largest logit, {largest:.3g}); not kept"
        )
    graphs = {"fp32": GRAPHS[None]}
    labels = {str(i): label for i, label in model.config.id2label.items()}
    pooling = getattr(model.config, "pooling", None)
    readout = word_readout_of(model.config)
    int8 = None
    if quantize is not None:
        about = {"inputs": inputs, "id2label": labels, "pooling": pooling, "word_readout": readout, "task": task}
        int8 = check_int8(
            checkpoint, task, tokenizer, staging, schemes_for(quantize, model), about, calibration, allow_lossy
        )
        graphs["int8"] = GRAPHS["int8"]
    save_tokenizer(tokenizer, staging)
    model.config.save_pretrained(
        staging
    )  # the model's config (labels, fusion, backbone), which the tokenizer's loading reads
    (staging / "README.md").write_text(export_card(checkpoint, task, model.config.fusion, graphs, int8))
    config = {
        "format": "onnx",
        "task": task,
        "source": portable_path(checkpoint),
        "architecture": type(model).__name__,
        "fusion": model.config.fusion,
        "id2label": labels,
        "pooling": pooling,
        "word_readout": readout,
        # a probe ensemble's members (relative to its folder) and how they were chosen; config.json is its first's
        **({"ensemble": model.manifest} if isinstance(model, AveragedHeads) else {}),
        "inputs": inputs,
        "graphs": graphs,
        "check": {"max_abs_logit_difference": difference, "largest_logit": largest, "tolerance": tolerance},
        **({"int8": int8} if int8 is not None else {}),
        "torch": torch.__version__,
        "onnxruntime": runtime.__version__,
        FILES_KEY: {path.name: sha256_of(path) for path in sorted(staging.iterdir()) if path.is_file()},
    }
    write_json_atomically(staging / EXPORT_CONFIG, config)
    give_usual_modes(staging)
    return config


def export_card(checkpoint, task: str, fusion: str, graphs: dict, int8: dict | None) -> str:
    """The export's README.md: what it holds, how to run it, and how far its int8 graph is from fp32."""
    lines = [
        f"# ONNX export ({task}, {fusion})",
        "",
        f"Written by `dwatt export` from `{portable_path(checkpoint)}`. Graphs: "
        + ", ".join(f"`{name}` ({kind})" for kind, name in graphs.items())
        + ". Run with `dwatt predict "
        "FOLDER ...` (onnxruntime; `--quantize int8` for the int8 graph); `dwatt_export.json` records the "
        "sha256 of every file, checked on load.",
    ]
    if int8 is not None:
        lossy = " Kept below the threshold with `--allow-lossy`." if int8["agreement"] < int8["threshold"] else ""
        lines += [
            "",
            f"**int8** ({int8['scheme']}): gives the fp32 graph's answer on {100 * int8['agreement']:.1f}% "
            f"of {int8['unit']} ({100 * int8['inputs_agreement']:.1f}% of whole inputs) of {int8['calibration']}; "
            f"the export refuses int8 under {100 * int8['threshold']:.0f}%.{lossy} Chosen on the exporting CPU "
            f"({int8['cpu']['model']}; {', '.join(int8['cpu']['flags']) or 'none of AVX2, AVX-512, VNNI, AMX'}) as "
            "the fastest of the schemes tried that keep the answers:",
            "",
            f"| scheme | {int8['unit']} as fp32 | time vs fp32 |",
            "|---|---|---|",
            *(
                f"| {c['scheme']} | {100 * c['agreement']:.1f}% | {c['time_vs_fp32']:.2f}x |"
                for c in int8.get("candidates", [])
            ),
        ]
    return "\n".join(lines) + "\n"


__all__ = [
    "check_graph",
    "cpu_capabilities",
    "export_card",
    "export_onnx",
    "graph_inputs",
    "logits_of",
    "quantize_onnx",
    "time_graphs",
    "write_graph",
    "write_graph_apart",
    "write_onnx",
]
