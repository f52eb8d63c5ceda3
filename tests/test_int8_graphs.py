"""int8 graphs of an export (dwatt.serving.int8_graphs): the scheme each backbone family gets, the per-token smoothed
graph against one scale per tensor on an input with an outlier token, the head left fp32, the calibration sample, and
the export that checks its int8 graph and refuses one that does not give the fp32 graph's answers."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dwatt import DWAttForTokenClassification
from dwatt.cli import main
from dwatt.serving import export, int8_graphs
from dwatt.serving.int8_graphs import (
    agreement,
    calibration_sample,
    quantize_dynamic_graph,
    quantize_smooth_graph,
    quantize_weights_graph,
    quantized_products,
    smoothing_scales,
)
from dwatt.serving.schemes import schemes_for

from .helpers import an_ensemble, saved_with_tokenizer

pytest.importorskip("onnxruntime", reason="the export extra: pip install -e '.[export]'")
onnxruntime = pytest.importorskip("onnxruntime")


def scoped(node, scopes: list[str]):
    node.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=repr(scopes))
    return node


def two_products(path, weight: np.ndarray, head: np.ndarray):
    """x -> x @ weight (in `model.dwatt`'s scope) -> @ head (in `model.classifier`'s): the exporter's shape."""
    nodes = [
        scoped(
            helper.make_node("MatMul", ["x", "w"], ["h"], name="body"),
            ["", "model", "model.dwatt", "model.dwatt.backbone.layers.0.mlp.down_proj"],
        ),
        scoped(helper.make_node("MatMul", ["h", "c"], ["logits"], name="head"), ["", "model", "model.classifier"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, weight.shape[0]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(head, "c")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def run(path, x):
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_per_token_smoothed_int8_keeps_the_tokens_that_one_scale_per_tensor_loses(tmp_path):
    """An LLM's down-projection input: one channel 100 times the rest on one token. One scale per tensor leaves the
    other tokens a few levels; per token and smoothed, each keeps its own range. The head's product stays fp32."""
    rng = np.random.default_rng(0)
    weight, head = rng.normal(size=(64, 32)).astype(np.float32), rng.normal(size=(32, 5)).astype(np.float32)
    x = rng.normal(size=(2, 10, 64)).astype(np.float32)
    x[0, 0, 7] = 400.0  # the massive activation
    source = two_products(tmp_path / "model.onnx", weight, head)
    assert [node.name for node in quantized_products(onnx.load(str(source)).graph)] == ["body"]
    quantize_dynamic_graph(source, tmp_path / "dynamic.onnx")
    ranges = {"x": np.abs(x).reshape(-1, 64).max(0)}
    assert quantize_smooth_graph(source, tmp_path / "smooth.onnx", smoothing_scales(source, ranges)) == {
        "int8": 1,
        "fp32": 0,
    }
    exact = x @ weight @ head
    # weights of 63 levels where this CPU's kernels would saturate 127 (`full_range_int8_exact`): twice the error
    coarser = 1 if int8_graphs.full_range_int8_exact() else 2

    def error(path):  # on the tokens without the outlier
        got = run(path, x)
        return np.linalg.norm((got - exact)[:, 1:]) / np.linalg.norm(exact[:, 1:])

    # (7-bit weights add an error floor to both, which narrows the ratio between them)
    assert error(tmp_path / "smooth.onnx") < 0.05 * coarser and 10 / coarser * error(tmp_path / "smooth.onnx") < error(
        tmp_path / "dynamic.onnx"
    )
    smooth = onnx.load(str(tmp_path / "smooth.onnx")).graph
    assert {node.op_type for node in smooth.node} >= {"MatMulInteger", "MatMul"}  # the head's product is fp32
    assert [node.name for node in smooth.node if node.op_type == "MatMul"] == ["head"]
    assert all(node.domain in ("", "ai.onnx") for node in smooth.node)  # standard operators only
    quantize_smooth_graph(source, tmp_path / "per-token.onnx", smoothing_scales(source, ranges, alpha=None))
    assert error(tmp_path / "per-token.onnx") < 0.02 * coarser  # per token, no smoothing
    assert quantize_smooth_graph(
        source, tmp_path / "kept.onnx", smoothing_scales(source, ranges), keep_fp32={"x"}
    ) == {"int8": 0, "fp32": 1}
    assert np.allclose(run(tmp_path / "kept.onnx", x), exact, rtol=1e-4, atol=1e-3)  # mixed precision: left fp32
    quantize_weights_graph(source, tmp_path / "weights.onnx")  # weights per block, activations per token's block
    weights = onnx.load(str(tmp_path / "weights.onnx")).graph
    assert [node.op_type for node in weights.node] == ["MatMulNBits", "MatMul"]  # the head's product is fp32
    assert error(tmp_path / "weights.onnx") < 0.05 and 10 * error(tmp_path / "weights.onnx") < error(
        tmp_path / "dynamic.onnx"
    )


def test_each_backbone_family_tries_its_schemes_and_a_named_one_is_taken(tiny_backbone, tiny_decoder):
    encoder = DWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=3)
    decoder = DWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=3)
    assert schemes_for("int8", encoder) == ("dynamic", "weights", "smooth")
    assert schemes_for("int8", decoder) == ("weights", "smooth")  # dynamic's one scale per tensor loses decoders
    assert (schemes_for("int8-smooth", encoder), schemes_for("int8-dynamic", decoder)) == (("smooth",), ("dynamic",))
    with pytest.raises(ValueError, match="'int4' is not one of int8, int8-dynamic, int8-smooth, int8-weights"):
        schemes_for("int4", encoder)


def test_the_calibration_sample_is_a_file_of_lines_or_the_tasks_dev_sentences(tmp_path):
    path = tmp_path / "calibration.txt"
    path.write_text("EU rejects German call\n\n  Peter Blackburn  \n")
    assert calibration_sample("ner", path) == (
        [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]],
        "2 lines of calibration.txt",
    )
    assert calibration_sample("cls", path)[0] == ["EU rejects German call", "Peter Blackburn"]
    sentences, described = calibration_sample("ner")
    assert len(sentences) == 128 and all(sentences) and described == "the first 128 sentences of CoNLL-03's dev split"
    texts, described = calibration_sample("cls", size=5)
    assert len(texts) == 5 and all(isinstance(text, str) for text in texts) and "AG News" in described
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(ValueError, match=r"--calibration .*empty\.txt: no input lines"):
        calibration_sample("ner", tmp_path / "empty.txt")


def test_agreement_counts_units_and_whole_inputs():
    found = agreement("ner", [["O", "B-PER"], ["O"]], [["O", "O"], ["O"]])
    assert found == {"unit": "words", "units": 3, "agreement": 2 / 3, "inputs_agreement": 0.5}
    assert agreement("cls", [[1], [2]], [[1], [2]])["unit"] == "texts"


def test_an_export_records_its_int8_agreement_and_refuses_a_graph_below_the_threshold(
    tiny_decoder, tmp_path, capsys, monkeypatch
):
    checkpoint = saved_with_tokenizer(
        DWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=5), tmp_path / "decoder", tiny_decoder
    )
    (tmp_path / "calibration.txt").write_text("EU rejects German call to boycott British lamb .\nPeter Blackburn\n")
    assert (
        main(
            [
                "export",
                str(checkpoint),
                str(tmp_path / "onnx"),
                "--quantize",
                "int8",
                "--calibration",
                str(tmp_path / "calibration.txt"),
            ]
        )
        == 0
    )
    record = json.loads((tmp_path / "onnx" / "dwatt_export.json").read_text())["int8"]
    # a decoder's schemes, each measured here against fp32 in rounds of its own; the fastest of those that keep 98% of
    # words (by its time over fp32's in the same rounds) is kept
    tried = {candidate["scheme"]: candidate for candidate in record["candidates"]}
    assert set(tried) == {"weights", "smooth"} and all(c["seconds"] > 0 for c in tried.values())
    keeping = [c for c in tried.values() if c["agreement"] >= 0.98]
    assert keeping and record["scheme"] == min(keeping, key=lambda c: c["time_vs_fp32"])["scheme"]
    assert all(c["time_vs_fp32"] == c["seconds"] / c["fp32_seconds"] for c in tried.values())
    assert record["time_vs_fp32"] == record["seconds"] / record["fp32_seconds"] and record["cpu"]["torch_capability"]
    assert f"int8 ({record['scheme']}): " in capsys.readouterr().out
    assert sorted(path.name for path in (tmp_path / "onnx").iterdir() if path.name.startswith(".")) == []
    assert record["unit"] == "words" and record["units"] == 11
    assert record["calibration"] == "2 lines of calibration.txt" and record["threshold"] == 0.98
    assert 0 <= record["agreement"] <= 1 and record["allow_lossy"] is False
    card = (tmp_path / "onnx" / "README.md").read_text()
    assert f"{100 * record['agreement']:.1f}% of words" in card and f"({record['scheme']})" in card
    assert "| scheme | words as fp32 | time vs fp32 |" in card and "| smooth | " in card and "| weights | " in card
    assert main(["export", str(checkpoint), str(tmp_path / "onnx"), "--quantize", "int8-smooth", "--allow-lossy"]) == 0
    record = json.loads((tmp_path / "onnx" / "dwatt_export.json").read_text())["int8"]
    assert record["scheme"] == "smooth" and record["calibration"] == "the first 128 sentences of CoNLL-03's dev split"
    assert 0 <= record["fp32_products"] <= record["products"] and record["products"] >= 3 * 7  # three layers

    monkeypatch.setattr(export, "AGREEMENT_THRESHOLD", 1.01)  # no graph can reach it
    before = sorted(path.name for path in (tmp_path / "onnx").iterdir())
    assert main(["export", str(checkpoint), str(tmp_path / "onnx"), "--quantize", "int8-dynamic"]) == 2
    error = "\n".join(
        line for line in capsys.readouterr().err.splitlines() if "error" in line
    )  # the load's progress aside
    assert (
        "its int8 graph (dynamic " in error
        and "gives under 101% of words the fp32 graph's answer on the first" in error
    )
    assert "; nothing exported: try --quantize int8-weights or --quantize int8-smooth, export fp32 alone" in error
    assert "--allow-lossy" in error
    assert len(error.strip().splitlines()) == 1
    assert sorted(path.name for path in (tmp_path / "onnx").iterdir()) == before  # the earlier export is kept
    assert json.loads((tmp_path / "onnx" / "dwatt_export.json").read_text())["int8"]["scheme"] == "smooth"
    assert (
        main(["export", str(checkpoint), str(tmp_path / "lossy"), "--quantize", "int8-dynamic", "--allow-lossy"]) == 0
    )
    assert json.loads((tmp_path / "lossy" / "dwatt_export.json").read_text())["int8"]["allow_lossy"] is True
    assert (
        main(
            [
                "export",
                str(checkpoint),
                str(tmp_path / "x"),
                "--quantize",
                "int8",
                "--calibration",
                str(tmp_path / "missing.txt"),
            ]
        )
        == 2
    )
    assert "--calibration" in capsys.readouterr().err and not (tmp_path / "x").exists()


@pytest.mark.parametrize("kind", ["model", "ensemble"])
def test_an_exported_graph_s_backbone_and_fusion_are_quantized_and_its_heads_are_not(
    kind, checkpoints, tiny_backbone, tmp_path
):
    """Found by the exporter's name scopes: a model's `dwatt` module (backbone and fusion), a probe ensemble's shared
    `backbone` too; the classifiers stay fp32."""
    from dwatt.serving.export import export_onnx

    source = checkpoints["ner"] if kind == "model" else an_ensemble("ner", tiny_backbone, tmp_path / "ensemble")
    export_onnx(source, tmp_path / "onnx")
    graph = onnx.load(str(tmp_path / "onnx" / "model.onnx"), load_external_data=False).graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    products = [
        node
        for node in graph.node
        if node.op_type == "MatMul" and len(getattr(weights.get(node.input[1]), "dims", ())) == 2
    ]
    quantized = {node.name for node in quantized_products(graph)}
    heads = [node for node in products if node.name not in quantized]
    labels = {dims[-1] for dims in (tuple(weights[node.input[1]].dims) for node in heads)}
    assert len(heads) == (1 if kind == "model" else 2) and labels <= {7, 3}  # each classifier: hidden -> labels
    assert len(quantized) >= 6 * 2  # the backbone's layers' products (two layers, at least six each)


@pytest.mark.parametrize("exact", [True, False], ids=["8-bit kernels exact", "8-bit kernels saturate"])
def test_dynamic_int8_takes_7_bit_weights_where_this_cpu_would_saturate_8(tmp_path, monkeypatch, exact):
    """The probe reads this CPU's kernels (a VNNI one sums 8-bit products exactly; an AVX2-only one saturates at 16
    bits); where they saturate, the dynamic graph's weights are 7-bit, and the export's record says so."""

    assert isinstance(int8_graphs.full_range_int8_exact(), bool)
    monkeypatch.setattr(int8_graphs, "full_range_int8_exact", lambda: exact)
    rng = np.random.default_rng(0)
    weight, head = rng.normal(size=(64, 32)).astype(np.float32), rng.normal(size=(32, 5)).astype(np.float32)
    source = two_products(tmp_path / "model.onnx", weight, head)
    assert quantize_dynamic_graph(source, tmp_path / "dynamic.onnx") == {"reduce_range": not exact}
    quantized = [
        onnx.numpy_helper.to_array(tensor)
        for tensor in onnx.load(str(tmp_path / "dynamic.onnx")).graph.initializer
        if tensor.data_type == onnx.TensorProto.INT8
    ]
    assert quantized and max(int(np.abs(q.astype(np.int32)).max()) for q in quantized) == (127 if exact else 64)


def test_smooth_keeps_more_inputs_fp32_by_their_error_until_the_graph_agrees_or_half_are(tmp_path, monkeypatch):
    """`calibrated_smooth_graph`: the inputs over `KEEP_FP32_ERROR` first; a graph under `AGREEMENT_THRESHOLD` keeps
    the next by error fp32 too, twice as many a round; at `MOST_KEPT_FP32` of the inputs it stops, agreeing or not;
    without `agrees`, one graph."""
    errors = dict(zip("abcdefghij", [0.2, 0.04, 0.03, 0.02, 0.01, 0.009, 0.008, 0.007, 0.006, 0.005]))
    written = []
    monkeypatch.setattr(int8_graphs, "input_ranges", lambda *args: {})
    monkeypatch.setattr(int8_graphs, "smoothing_scales", lambda *args: {})
    monkeypatch.setattr(int8_graphs, "per_token_errors", lambda *args: errors)

    def quantize(source, target, scales, keep_fp32=()):
        written.append("".join(keep_fp32))
        return {"int8": 10 - len(keep_fp32), "fp32": len(keep_fp32)}

    monkeypatch.setattr(int8_graphs, "quantize_smooth_graph", quantize)
    smooth = int8_graphs.calibrated_smooth_graph
    agrees_from_four = lambda path: 0.99 if len(written[-1]) >= 4 else 0.9  # noqa: E731
    assert smooth("in", "out", None, None, agrees_from_four) == {"fp32_products": 4, "products": 10, "fp32_inputs": 4}
    assert written == ["a", "ab", "abcd"]
    written.clear()
    assert smooth("in", "out", None, None, lambda path: 0.5)["fp32_inputs"] == 5  # half the inputs: stopped there
    assert written == ["a", "ab", "abcd", "abcde"]
    written.clear()
    assert smooth("in", "out", None, None)["fp32_inputs"] == 1 and written == ["a"]


def test_an_export_measures_each_int8_graph_it_writes_once(tiny_decoder, tmp_path, monkeypatch):
    """The graph `smooth` keeps was measured by its own rounds: the export reads that figure, not a second pass over
    the calibration sample; a graph written again is measured again."""
    checkpoint = saved_with_tokenizer(
        DWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=5), tmp_path / "decoder", tiny_decoder
    )
    (tmp_path / "calibration.txt").write_text("EU rejects German call to boycott British lamb .\nPeter Blackburn\n")
    measured, written = [], []
    monkeypatch.setattr(export, "AGREEMENT_THRESHOLD", 0.0)  # the first graph agrees enough: one round
    monkeypatch.setattr(export, "agreement", lambda *args, real=agreement: measured.append(1) or real(*args))
    write = int8_graphs.quantize_smooth_graph
    monkeypatch.setattr(
        int8_graphs, "quantize_smooth_graph", lambda *args, **kwargs: written.append(1) or write(*args, **kwargs)
    )
    command = ["export", str(checkpoint), str(tmp_path / "onnx"), "--quantize", "int8-smooth"]
    assert main([*command, "--calibration", str(tmp_path / "calibration.txt")]) == 0
    record = json.loads((tmp_path / "onnx" / "dwatt_export.json").read_text())["int8"]
    assert record["scheme"] == "smooth" and 0 <= record["agreement"] <= 1
    assert len(written) == 1 and len(measured) == 1  # was 2: the kept graph measured again after smooth's round
