"""int8 graphs for an ONNX export (`dwatt export --quantize ...`), and the check that an int8 graph gives the fp32
graph's answers.

Three schemes (`INT8_SCHEMES`), each quantizing the backbone's and the fusion's linear maps (matrix products by a
weight matrix); the task head stays fp32, as in PyTorch's int8 path.
- `dynamic`: onnxruntime's `quantize_dynamic`: int8 weights with one scale per output channel; activations quantized
  per batch, one scale per tensor.
- `weights`: onnxruntime's `MatMulNBits` (its `MatMulNBitsQuantizer`): int8 weights with one scale per block of 128
  inputs of an output channel, and int8 arithmetic (`accuracy_level` 4: activations quantized per block of each
  token's row as the graph runs).
- `smooth`: activations quantized per token (one scale per row, computed as the graph runs), after SmoothQuant's
  migration of each input channel's range into the weights (scale s = max|x|^0.5 / max|w|^0.5 over a calibration
  sample; the activation is divided by s, the weight's rows multiplied by it); the few products whose smoothed
  input still loses over `KEEP_FP32_ERROR` per token on the sample stay fp32, and more by that loss while the graph
  gives under `AGREEMENT_THRESHOLD` of the fp32 graph's answers (at most `MOST_KEPT_FP32` of the inputs). Standard
  ONNX operators (`MatMulInteger`): any runtime that runs ONNX runs it.

Why decoders need another: a decoder LLM's feed-forward down-projections read a product whose few outlier channels
reach 100 times the median channel on a few tokens (the "massive activations" of LLMs). One scale per tensor then
leaves the other tokens a handful of levels; one scale per token (`smooth`) or per block of a weight's inputs
(`weights`) keeps them. How much each scheme keeps of the fp32 graph's answers, and how fast it runs, on encoders and
decoders and on which CPU, is measured by `benchmarks/int8_decoders.py` and `benchmarks/int8_choice.py` (their
results under benchmarks/results): which scheme is faster depends on the CPU.

int8's speed is the CPU's (VNNI, AMX): `--quantize int8` tries the schemes that may keep the backbone family's answers
(`dwatt.serving.schemes.schemes_for`: all three for encoders, `weights` and `smooth` for decoder-only LLMs) and keeps
the fastest, measured on the exporting machine, of those that keep them; `--quantize int8-<scheme>` forces one. The
export runs the graphs on a calibration sample (`--calibration FILE`, one input per line; by default the first
`CALIBRATION_SIZE` sentences of CoNLL-03's dev split, or texts of AG News' evaluation split), records how often the
int8 graph gives the fp32 graph's answer (`agreement`: words for a tagger, texts for a classifier, tokens for a masked
LM) and refuses an int8 graph below `AGREEMENT_THRESHOLD` unless asked to keep it (`--allow-lossy`).
"""

from __future__ import annotations

import collections
import functools
import tempfile
from collections.abc import Callable, Collection
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

from ..data import load_conll2003
from ..data.classification import load_classification_dataset
from ..data.targets import MULTI_LABEL, REGRESSION, decided_by_probabilities
from ..tasks import task_named
from .lines import decoded
from .onnx_runtime import session_options
from .prediction import class_probabilities, encode_texts, logits_of, pad_id, padded, predict_tags, split_pairs
from .schemes import EXPORT_QUANTIZATIONS, INT8_SCHEMES

AGREEMENT_THRESHOLD = 0.98
CALIBRATION_SIZE = 128
WEIGHT_BLOCK = 128  # inputs per weight scale of the `weights` scheme
SMOOTHING_ALPHA = 0.5  # SmoothQuant's migration strength: 0.5, 0.7 measured alike on SmolLM2 (98.2%, 98.3% of words)
# A smoothed input whose per-token 8-bit error passes this on a calibration batch keeps its products fp32: on
# SmolLM2's layer-11 head, the inputs of 3 of 77 products, 5.3-5.5% (the next 4.1%); that took its test words from
# 98.09% to 98.54% as fp32 (benchmarks/results/int8_decoders_cpu.md: "smooth alone", "smooth").
KEEP_FP32_ERROR = 0.05
# The share of quantized inputs `smooth` may keep fp32 (by their error, most first) to reach `AGREEMENT_THRESHOLD`.
MOST_KEPT_FP32 = 0.5


# The sample ------------------------------------------------------------------------------------------------------


def calibration_sample(task: str, path: str | Path | None = None, size: int = CALIBRATION_SIZE) -> tuple[list, str]:
    """Inputs to calibrate and check an int8 graph on, and where they come from: the lines of `path` (one input per
    line, as `dwatt predict --file` reads them; blank lines skipped; a tagger's split on whitespace), or by default
    the first `size` sentences of CoNLL-03's dev split (a tagger's words; a masked LM's text) or texts of AG News'
    evaluation split (a classifier's)."""
    check = TASK_CHECKS[task_named(task).kind]
    if path is None:
        return check.default_sample(size)

    raw = Path(path).read_bytes()
    lines = [decoded(line, str(path), number) for number, line in enumerate(raw.splitlines(), 1)]
    texts = [line.strip() for line in lines if line.strip()][:size]
    if not texts:
        raise ValueError(f"--calibration {path}: no input lines (one sentence or text a line)")
    return check.from_lines(texts), f"{len(texts)} lines of {Path(path).name}"


def _conll_sentences(size: int) -> tuple[list[list[str]], str]:

    sentences = [words for words in load_conll2003()["validation"]["tokens"] if words][:size]
    return sentences, f"the first {len(sentences)} sentences of CoNLL-03's dev split"


def _conll_texts(size: int) -> tuple[list[str], str]:
    sentences, described = _conll_sentences(size)
    return [" ".join(words) for words in sentences], described


def _ag_news_texts(size: int) -> tuple[list[str], str]:

    texts = list(load_classification_dataset("ag_news")["validation"]["text"][:size])
    return texts, f"the first {len(texts)} texts of AG News' evaluation split"


def _split_words(texts: list[str]) -> list[list[str]]:
    return [text.split() for text in texts]


def _tags(model, tokenizer, sample: list) -> list[list]:

    return predict_tags(model, tokenizer, sample)


def _labels(model, tokenizer, sample: list) -> list[list]:
    """Each text's answer: its class; the classes above 0.5 (multi-label); its number to two decimals (regression)."""
    problem_type = getattr(model.config, "problem_type", None)
    decisions = decided_by_probabilities(
        class_probabilities(model, tokenizer, *split_pairs(tokenizer, sample)), problem_type
    )
    if problem_type == REGRESSION:
        return [[round(float(value), 2)] for value in decisions]
    if problem_type == MULTI_LABEL:
        return [[int(i) for i in row.nonzero()[0]] for row in decisions]
    return [[int(label)] for label in decisions]


def _top_tokens(model, tokenizer, sample: list) -> list[list]:

    rows = encode_texts(tokenizer, sample)
    found = []
    for start in range(0, len(sample), 32):
        indices = list(range(start, min(start + 32, len(sample))))
        logits = logits_of(model, padded(rows, indices, pad_id(tokenizer)))
        found += [list(logits[place, : len(rows["input_ids"][row])].argmax(-1)) for place, row in enumerate(indices)]
    return found


class TaskCheck(NamedTuple):
    """How a task's int8 graph is checked: what one answer is (`unit`), inputs from lines of text, the default
    sample (`size` -> inputs, where they come from) and the model's answers to them, a list per input."""

    unit: str
    from_lines: Callable[[list[str]], list]
    default_sample: Callable[[int], tuple[list, str]]
    answers: Callable[[object, object, list], list[list]]


TAGGER = TaskCheck("words", _split_words, _conll_sentences, _tags)
CLASSIFIER = TaskCheck("texts", list, _ag_news_texts, _labels)
MASKED_LM = TaskCheck("tokens", list, _conll_texts, _top_tokens)
TASK_CHECKS = {"tagging": TAGGER, "classification": CLASSIFIER, "masked_lm": MASKED_LM}  # by `Task.kind`


def answers(task: str, model, tokenizer, sample: list) -> list[list]:
    """`model`'s answer to every input of `sample`, as a list per input: a tagger's tag per word, a classifier's
    label, a masked LM's most likely token at every position."""
    return TASK_CHECKS[task_named(task).kind].answers(model, tokenizer, sample)


def agreement(task: str, reference: list[list], other: list[list]) -> dict:
    """How often `other`'s answers are `reference`'s: per unit (word, text, token) and per whole input."""
    units = sum(len(answer) for answer in reference)
    same = sum(a == b for mine, theirs in zip(reference, other) for a, b in zip(mine, theirs))
    whole = sum(mine == theirs for mine, theirs in zip(reference, other))
    return {
        "unit": TASK_CHECKS[task_named(task).kind].unit,
        "units": units,
        "agreement": same / max(units, 1),
        "inputs_agreement": whole / max(len(reference), 1),
    }


# The graphs ------------------------------------------------------------------------------------------------------


def quantized_products(graph) -> list:
    """The graph's matrix products by a weight matrix (a 2-D initializer) in the backbone and the fusion: the
    exporter's name scopes place each node in its module, and a product in no `dwatt` (backbone and fusion) or
    `backbone` (a probe ensemble's shared one) module is a task head's.
    (Products by a stack of matrices, DWAtt's value MLPs, stay fp32: onnxruntime's integer product takes one scale
    per channel of a matrix only.)"""
    ranks = {tensor.name: len(tensor.dims) for tensor in graph.initializer}
    products = [node for node in graph.node if node.op_type == "MatMul" and ranks.get(node.input[1]) == 2]
    return [node for node in products if not is_head(node)]


def is_head(node) -> bool:
    """Whether the exporter placed `node` in no backbone or fusion module (a graph without name scopes: none is)."""
    scopes = {prop.key: prop.value for prop in node.metadata_props}.get("pkg.torch.onnx.name_scopes")
    return scopes is not None and not any(
        scope.split(".")[-1] in ("dwatt", "backbone") for scope in _scope_list(scopes)
    )


def _scope_list(text: str) -> list[str]:
    return [part.strip(" '\"") for part in text.strip("[]").split(",")]


@functools.cache
def full_range_int8_exact() -> bool:
    """Whether onnxruntime's dynamic int8 products keep 8-bit weights exact on this CPU: a probe whose pairs of
    products (255 x -127, twice) overflow 16 bits, as CPUs without VNNI sum them (AVX2's `vpmaddubsw` saturates),
    checked against the exact sum (-64; -32.4 on an AVX2-only AMD EPYC, where a tiny tagger's int8 graph kept 89.7%
    of words where 7-bit weights keep them all)."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    weight = numpy_helper.from_array(-np.ones((64, 4), dtype=np.float32), "weight")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])]
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "weight"], ["y"])], "probe", inputs, outputs, [weight])
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder, "fp32.onnx"), Path(folder, "int8.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(source))
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True)
        session = onnxruntime.InferenceSession(str(target), providers=["CPUExecutionProvider"])
        product = session.run(None, {"x": np.ones((2, 64), np.float32)})[0]
    return bool(np.allclose(product, -64.0, rtol=0.02))


def quantize_dynamic_graph(source: Path, target: Path, keep_fp32: Collection[str] = ()) -> dict:
    """onnxruntime's dynamic int8 quantization of `source`'s backbone and fusion (scheme `dynamic`), but the
    products named in `keep_fp32` (mixed precision); its weights 7-bit where this CPU's kernels would saturate on 8
    (`full_range_int8_exact`: onnxruntime's `reduce_range`). Returns what it chose, for the export's record."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source), load_external_data=False).graph
    wanted = {node.name for node in quantized_products(graph)} - set(keep_fp32)
    kept = [node.name for node in graph.node if node.op_type == "MatMul" and node.name not in wanted]
    reduce_range = not full_range_int8_exact()
    quantize_dynamic(
        str(source),
        str(target),
        weight_type=QuantType.QInt8,
        reduce_range=reduce_range,
        per_channel=True,
        nodes_to_exclude=kept,
        use_external_data_format=_large(source),
    )
    return {"reduce_range": reduce_range}


def quantize_weights_graph(source: Path, target: Path, bits: int = 8) -> None:
    """onnxruntime's `MatMulNBits` of `source`'s backbone and fusion (scheme `weights`): symmetric weights of `bits`
    bits in blocks of `WEIGHT_BLOCK`, int8 arithmetic."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    model = onnx.load(str(source))
    wanted = {node.name for node in quantized_products(model.graph)}
    kept = [node.name for node in model.graph.node if node.op_type == "MatMul" and node.name not in wanted]
    # the bits given through the configuration: onnxruntime 1.22's quantizer takes them nowhere else
    scheme = DefaultWeightOnlyQuantConfig(block_size=WEIGHT_BLOCK, is_symmetric=True, accuracy_level=4, bits=bits)
    quantizer = MatMulNBitsQuantizer(model, nodes_to_exclude=kept, algo_config=scheme)
    quantizer.process()
    quantizer.model.save_model_to_file(str(target), use_external_data_format=_large(source))


def _large(graph: Path) -> bool:
    """Whether a graph's weights are too large for one protobuf file (2 GiB), with room for the quantized copy."""
    data = graph.with_name(graph.name + ".data")
    return (data.stat().st_size if data.exists() else graph.stat().st_size) > 2**30


class _RecordingGraph:
    """A graph run like `OnnxModel` (`dwatt.serving.prediction` calls it), with each quantized product's input as an
    extra output, handed to `record(input name, values as rows of channels)` batch by batch."""

    takes_arrays = True

    def __init__(self, session, inputs: list[str], config, record: Callable[[str, np.ndarray], None]):
        self.session, self.inputs, self.config, self.record = session, inputs, config, record
        self.feeds = [item.name for item in session.get_inputs()]

    def __call__(self, **batch):

        zeros = np.zeros_like(batch["input_ids"])
        outputs = self.session.run(
            ["logits", *self.inputs], {name: np.asarray(batch.get(name, zeros), dtype=np.int64) for name in self.feeds}
        )
        for name, values in zip(self.inputs, outputs[1:]):
            self.record(name, values.reshape(-1, values.shape[-1]))
        return SimpleNamespace(logits=outputs[0])


def run_recording(
    source: Path, fp32, run_sample: Callable[[object], object], record: Callable[[str, np.ndarray], None]
) -> None:
    """`run_sample(model)` through `source`'s graph with each quantized product's input recorded (`_RecordingGraph`;
    `model` is called as `fp32`, the graph's `OnnxModel`, is). The graph runs from a copy of its structure beside
    it, reading the same weights file, removed once loaded."""
    import onnx
    import onnxruntime as runtime

    model = onnx.load(str(source), load_external_data=False)
    inputs = list(dict.fromkeys(node.input[0] for node in quantized_products(model.graph)))
    model.graph.output.extend(
        onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None) for name in inputs
    )
    probe = source.with_name(f".calibration-{source.name}")
    onnx.save(model, str(probe))
    try:
        session = runtime.InferenceSession(str(probe), session_options(runtime), providers=["CPUExecutionProvider"])
    finally:
        probe.unlink()
    run_sample(_RecordingGraph(session, inputs, fp32.config, record))


def input_ranges(source: Path, fp32, run_sample: Callable[[object], object]) -> dict[str, np.ndarray]:
    """Each quantized product's input: its largest magnitude per channel over the calibration sample
    (`run_recording`)."""
    ranges: dict[str, np.ndarray] = {}

    def record(name: str, rows: np.ndarray) -> None:
        largest = np.abs(rows).max(0)
        ranges[name] = np.maximum(ranges[name], largest) if name in ranges else largest

    run_recording(source, fp32, run_sample, record)
    return ranges


def smoothing_scales(
    source: Path, ranges: dict[str, np.ndarray], alpha: float | None = SMOOTHING_ALPHA
) -> dict[str, np.ndarray]:
    """Each quantized input's SmoothQuant scale per channel, max|x|^alpha / max|w|^(1 - alpha) over the weights of
    the products that read it (ones with `alpha` None: per token alone)."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(source)).graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    sharing = collections.defaultdict(list)
    for node in quantized_products(graph):
        sharing[node.input[0]].append(np.abs(numpy_helper.to_array(weights[node.input[1]])).max(1))
    scales = {}
    for name, largest in sharing.items():
        largest_weight = np.max(largest, axis=0)
        scales[name] = (
            np.ones_like(largest_weight)
            if alpha is None
            else np.maximum(ranges[name], 1e-5) ** alpha / np.maximum(largest_weight, 1e-5) ** (1 - alpha)
        ).astype(np.float32)
    return scales


def per_token_errors(
    source: Path, fp32, run_sample: Callable[[object], object], scales: dict[str, np.ndarray]
) -> dict[str, float]:
    """Each quantized input, smoothed by `scales`: the largest relative error over the calibration batches of 8 bits
    with one scale per token, the error the `smooth` graph makes there (`run_recording`)."""
    errors: dict[str, float] = {}

    def record(name: str, rows: np.ndarray) -> None:
        smoothed = rows / scales[name]
        step = np.maximum(np.abs(smoothed).max(1, keepdims=True), 1e-30) / 127
        error = np.linalg.norm(np.round(smoothed / step) * step - smoothed) / max(
            float(np.linalg.norm(smoothed)), 1e-30
        )
        errors[name] = max(errors.get(name, 0.0), float(error))

    run_recording(source, fp32, run_sample, record)
    return errors


def calibrated_smooth_graph(
    source: Path,
    target: Path,
    fp32,
    run_sample: Callable[[object], object],
    agrees: Callable[[Path], float] | None = None,
) -> dict:
    """The `smooth` scheme, calibrated on the sample `run_sample` runs: the inputs' ranges, their smoothing scales,
    then the error each smoothed input makes per token; the few inputs whose error passes `KEEP_FP32_ERROR` keep
    their products fp32 (mixed precision). Given `agrees` (a graph's path -> the share of the sample's answers it
    gives as the fp32 graph does), a graph under `AGREEMENT_THRESHOLD` keeps the next inputs by error fp32 too, twice
    as many each round, until it reaches the threshold or `MOST_KEPT_FP32` of the inputs are fp32 (past that, int8
    has little left to save). Returns what was left fp32: `{"fp32_products", "products", "fp32_inputs"}`."""
    scales = smoothing_scales(source, input_ranges(source, fp32, run_sample))
    errors = per_token_errors(source, fp32, run_sample, scales)
    ranked = sorted(errors, key=errors.get, reverse=True)
    kept = sum(error > KEEP_FP32_ERROR for error in errors.values())
    most = int(MOST_KEPT_FP32 * len(ranked))
    while True:
        products = quantize_smooth_graph(source, target, scales, keep_fp32=ranked[:kept])
        if agrees is None or kept >= most or agrees(target) >= AGREEMENT_THRESHOLD:
            break
        kept = min(most, max(2 * kept, kept + 1))
    return {"fp32_products": products["fp32"], "products": sum(products.values()), "fp32_inputs": kept}


def quantize_smooth_graph(
    source: Path, target: Path, scales: dict[str, np.ndarray], keep_fp32: Collection[str] = ()
) -> dict[str, int]:
    """`source` with its backbone's and fusion's products by a weight matrix in int8 (scheme `smooth`), but those
    reading an input named in `keep_fp32`: each product's input divided by its smoothing scale (`scales`:
    `smoothing_scales`), quantized per token (symmetric, stored as uint8 around 128), multiplied
    by the int8 weight (one scale per output channel) with `MatMulInteger`, and rescaled; the products that share
    an input share its quantization. Written to `target` (weights beside it in `<target>.data` when large).
    Returns how many products are int8 and how many fp32."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    sharing = collections.defaultdict(list)
    left = 0
    for node in quantized_products(graph):
        if node.input[0] in keep_fp32:
            left += 1
        else:
            sharing[node.input[0]].append(node)
    constants = {
        "dwatt_int8_axes": np.array([-1], np.int64),
        "dwatt_int8_step": np.array(1 / 127, np.float32),
        "dwatt_int8_tiny": np.array(1e-30, np.float32),
        "dwatt_int8_offset": np.array(128, np.float32),
        "dwatt_int8_zero": np.array(128, np.uint8),
    }
    added, replacing = [numpy_helper.from_array(value, name) for name, value in constants.items()], {}
    # 7-bit weights where this CPU's kernels would saturate 8-bit ones (`full_range_int8_exact`): 255 x 63, twice,
    # stays within 16 bits
    levels = 127 if full_range_int8_exact() else 63
    for number, (source_name, nodes) in enumerate(sharing.items()):
        prefix = f"dwatt_int8_{number}_"
        matrices = [numpy_helper.to_array(weights[node.input[1]]).astype(np.float32) for node in nodes]
        smoothing = scales[source_name]
        added.append(numpy_helper.from_array(1 / smoothing, prefix + "unsmooth"))
        name = lambda part, prefix=prefix: prefix + part
        quantizing = [
            helper.make_node("Mul", [source_name, name("unsmooth")], [name("smoothed")], name=name("smoothed")),
            helper.make_node("Abs", [name("smoothed")], [name("abs")], name=name("abs")),
            helper.make_node(
                "ReduceMax", [name("abs"), "dwatt_int8_axes"], [name("max")], keepdims=1, name=name("max")
            ),
            helper.make_node("Max", [name("max"), "dwatt_int8_tiny"], [name("nonzero")], name=name("nonzero")),
            helper.make_node("Mul", [name("nonzero"), "dwatt_int8_step"], [name("scale")], name=name("scale")),
            helper.make_node("Div", [name("smoothed"), name("scale")], [name("scaled")], name=name("scaled")),
            helper.make_node("Round", [name("scaled")], [name("rounded")], name=name("rounded")),
            helper.make_node("Add", [name("rounded"), "dwatt_int8_offset"], [name("shifted")], name=name("shifted")),
            helper.make_node("Cast", [name("shifted")], [name("q")], to=TensorProto.UINT8, name=name("q")),
        ]
        for index, (node, matrix) in enumerate(zip(nodes, matrices)):
            smoothed = matrix * smoothing[:, None]
            channel_scale = (np.maximum(np.abs(smoothed).max(0), 1e-30) / levels).astype(np.float32)
            quantized = np.clip(np.round(smoothed / channel_scale), -levels, levels).astype(np.int8)
            part = lambda piece, prefix=prefix, index=index: f"{prefix}{index}_{piece}"
            added += [
                numpy_helper.from_array(quantized, part("weight")),
                numpy_helper.from_array(channel_scale, part("channel_scale")),
            ]
            replacing[node.name] = quantizing + [
                helper.make_node(
                    "MatMulInteger",
                    [name("q"), part("weight"), "dwatt_int8_zero"],
                    [part("product")],
                    name=part("product"),
                ),
                helper.make_node("Cast", [part("product")], [part("float")], to=TensorProto.FLOAT, name=part("float")),
                helper.make_node("Mul", [part("float"), name("scale")], [part("rows")], name=part("rows")),
                helper.make_node("Mul", [part("rows"), part("channel_scale")], [node.output[0]], name=part("output")),
            ]
            quantizing = []  # the first product of the shared input quantizes it, before that product
    nodes = [new for node in graph.node for new in replacing.get(node.name, [node])]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(added)
    used = {name for node in graph.node for name in node.input}
    kept = [tensor for tensor in graph.initializer if tensor.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    large = sum(tensor.ByteSize() for tensor in kept) > 2**30
    onnx.save(model, str(target), save_as_external_data=large, location=target.name + ".data")
    return {"int8": len(replacing), "fp32": left}


__all__ = [
    "AGREEMENT_THRESHOLD",
    "CALIBRATION_SIZE",
    "EXPORT_QUANTIZATIONS",
    "INT8_SCHEMES",
    "KEEP_FP32_ERROR",
    "MOST_KEPT_FP32",
    "TASK_CHECKS",
    "TaskCheck",
    "agreement",
    "answers",
    "calibrated_smooth_graph",
    "calibration_sample",
    "input_ranges",
    "per_token_errors",
    "run_recording",
    "quantize_dynamic_graph",
    "quantize_smooth_graph",
    "quantize_weights_graph",
    "quantized_products",
    "smoothing_scales",
]
