"""Serving on a CPU (dwatt.serving.export): every fusion is one graph (torch.export with dynamic batch and sequence,
torch.compile with fullgraph=True) and exports to ONNX with onnxruntime's logits within 1e-4 of PyTorch's on every
family, and a re-export killed at any point leaves the old export or the new one. The command: test_cli_export;
running an export: test_onnx_runtime."""

import numpy as np
import pytest
import torch

from configuration_dwatt import FUSIONS
from dwatt import DWAttConfig, DWAttForSequenceClassification, DWAttForTokenClassification

from .families import ALL_FAMILIES, encoder_config, installed, is_decoder, works
from .helpers import files_of, fresh_copy, padded_batch
from .helpers import with_random_head as trained_like

pytest.importorskip("onnxruntime", reason="the export extra: pip install -e '.[export]'")
pytest.importorskip("onnxscript", reason="the export extra: pip install -e '.[export]'")

# transformers' mixture-of-experts layers run a custom operator (`transformers::grouped_mm_fallback`) that the ONNX
# exporter cannot translate, for transformers' own models as for these: they export with torch.export, not to ONNX.
NO_ONNX = {"mixtral", "qwen2_moe", "qwen3_moe"}
# The families whose extra layers (Base+n) take inputs of their own: relative positions, rotary embeddings, local and
# global attention, sliding windows, another layer list.
OWN_LAYER_INPUTS = (
    "mpnet",
    "roformer",
    "deberta",
    "deberta-v2",
    "modernbert",
    "distilbert",
    "albert",
    "gpt2",
    "gemma2",
    "qwen2",
)
# Every fusion on one encoder and one decoder; DWAtt (its layer-by-layer CPU path) on every family; Base+n where a
# family hands its layers inputs of its own. (About 5 s an export: every cell on every family would take 20 minutes.)
GRAPH_CELLS = [
    (family, fusion)
    for family in ALL_FAMILIES
    for fusion in FUSIONS
    if works(family, fusion)
    and (family in ("bert", "llama") or fusion == "dwatt" or (fusion == "base_plus_n" and family in OWN_LAYER_INPUTS))
]
# A head on layer 2 of 3 runs a cut backbone (its last layer's output kept by a forward hook where the family's final
# norm would follow): an encoder, decoders with a final norm of each kind, and an encoder with one.
GRAPH_CELLS += [(family, "base:2") for family in ("bert", "llama", "gpt2", "modernbert")]
# A fusion of a window of layers alone (only:1-2) runs a cut backbone too, the window's deepest layer as z_L.
GRAPH_CELLS += [("bert", "scalar_mix:only:1-2"), ("llama", "dwatt:only:1-2")]
ONNX_CELLS = [cell for cell in GRAPH_CELLS if cell[0] not in NO_ONNX]
EXPORT_CELLS = [cell for cell in GRAPH_CELLS if cell[0] in NO_ONNX]


def family_model(family: str, fusion: str):
    """A tiny random model of `family` with `fusion`: a tagger on an encoder, a classifier (last-token pooling) on a
    decoder; trained-like heads, eval mode."""
    task = DWAttForSequenceClassification if is_decoder(family) else DWAttForTokenClassification
    torch.manual_seed(0)
    fusion, _, layer = fusion.partition(":")
    config = DWAttConfig(
        encoder_config=encoder_config(family), fusion=fusion, num_labels=5, fused_layers=layer or "all"
    )
    return trained_like(task(config))


@pytest.mark.parametrize("family, fusion", EXPORT_CELLS, ids=["-".join(cell) for cell in EXPORT_CELLS])
def test_mixture_of_experts_families_trace_with_torch_export_and_dynamic_axes(family, fusion):
    from torch.export import Dim

    if not installed(family):
        pytest.skip(f"this transformers has no {family!r} model")
    model = family_model(family, fusion)
    axes = {0: Dim("batch", max=64), 1: Dim("sequence", max=60)}
    exported = torch.export.export(
        model, (), padded_batch(2, 7, seed=1), strict=False, dynamic_shapes={"input_ids": axes, "attention_mask": axes}
    )
    other = padded_batch(3, 11, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(**other).logits, model(**other).logits, atol=1e-5, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("family, fusion", ONNX_CELLS, ids=["-".join(cell) for cell in ONNX_CELLS])
def test_every_fusion_exports_to_onnx_with_dynamic_axes_and_runs_in_onnxruntime(family, fusion, tmp_path):
    import onnxruntime

    from dwatt.serving.export import graph_inputs, write_onnx

    if not installed(family):
        pytest.skip(f"this transformers has no {family!r} model")
    model = family_model(family, fusion)
    names = graph_inputs(model)
    batch = padded_batch(2, 7, seed=1)
    batch |= {"token_type_ids": torch.zeros_like(batch["input_ids"])} if "token_type_ids" in names else {}
    difference, largest = write_onnx(model, batch, tmp_path / "model.onnx")
    assert difference <= 1e-4 * max(1.0, largest) and largest > 0
    other = padded_batch(3, 11, seed=2)  # another batch size and length than the graph was traced with
    other |= {"token_type_ids": torch.zeros_like(other["input_ids"])} if "token_type_ids" in names else {}
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    got = torch.from_numpy(session.run(None, {name: other[name].numpy() for name in names})[0])
    with torch.no_grad():
        expected = model(**other).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("family", ["bert", "llama"])
@pytest.mark.parametrize("fusion", [*FUSIONS, "base:2", "dwatt:only:1-2"])
def test_every_fusion_compiles_as_one_graph(family, fusion):
    """`torch.compile(fullgraph=True)` fails on any graph break: a Python branch on tensor values, a data-dependent
    shape. (The eager backend checks the capture without paying for code generation.)"""
    torch._dynamo.reset()  # each cell compiles afresh, within dynamo's recompile limit
    model = family_model(family, fusion)
    batch = padded_batch(2, 7, seed=1)
    with torch.no_grad():
        eager = model(**batch).logits  # (transformers installs its hidden-state hooks on a model's first run)
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        torch.testing.assert_close(compiled(**batch).logits, eager, atol=1e-5, rtol=0)


def test_eager_and_traced_runs_give_the_same_logits_at_the_positions_read(tiny_backbone):
    """Eager runs fuse the non-padding positions only; a traced graph fuses every position and zeroes the others:
    the same logits everywhere."""
    from torch.export import Dim

    torch.manual_seed(0)
    model = trained_like(DWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=5))
    batch = padded_batch(2, 7, seed=3)
    batch["input_ids"] = batch["input_ids"] % 16
    dims = {
        "input_ids": {0: Dim("b", max=64), 1: Dim("s", max=60)},
        "attention_mask": {0: Dim("b", max=64), 1: Dim("s", max=60)},
    }
    dims["attention_mask"] = dims["input_ids"]
    exported = torch.export.export(model, (), batch, dynamic_shapes=dims, strict=False)
    with torch.no_grad():
        eager = model(**batch).logits
    torch.testing.assert_close(exported.module()(**batch).logits, eager, atol=1e-6, rtol=0)
    assert (eager[0, 4:] == 0).all()  # padding: zero logits both ways


def test_a_re_export_killed_at_any_point_leaves_the_old_export_or_the_new_one(checkpoints, exported_ner, tmp_path):
    """A real SIGKILL while the new export is being written (at a few points in time), then a look at the folder:
    it loads and is byte for byte the old export or a complete new one."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from dwatt.serving.onnx_runtime import load_export

    old = files_of(exported_ner)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    outcomes = set()
    for delay in (1.0, 3.0, 6.0):
        folder = fresh_copy(exported_ner, tmp_path / f"after-{delay}")
        process = subprocess.Popen(
            [sys.executable, "-m", "dwatt.cli", "export", str(checkpoints["cls"]), str(folder)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        now = files_of(folder)
        model, _, task = load_export(folder)  # loads, its files checked
        assert now == old or (task == "cls" and "model_int8.onnx" not in now), delay
        outcomes.add("old" if now == old else "new")
    assert "old" in outcomes


def test_a_large_checkpoint_s_graph_is_written_apart_and_checked_against_the_logits_of_weights_let_go(
    checkpoints, tmp_path, monkeypatch
):
    """Above `APART_ABOVE` (here every checkpoint), the export takes PyTorch's logits on the check batch, lets go of
    the weights (`release_weights`: the meta device) and writes the graph in a spawned process that loads the
    checkpoint again; onnxruntime's logits are checked against those taken before, and the export runs as one made
    in this process does."""
    import json

    import dwatt.serving.export as export
    from dwatt.serving.onnx_runtime import OnnxModel

    released = []
    monkeypatch.setattr(export, "APART_ABOVE", 0)
    monkeypatch.setattr(export, "release_weights", lambda model: released.append(model) or model.to("meta"))
    export.export_onnx(checkpoints["ner"], tmp_path / "apart")
    assert len(released) == 1 and all(parameter.is_meta for parameter in released[0].parameters())
    check = json.loads((tmp_path / "apart" / "dwatt_export.json").read_text())["check"]
    assert check["max_abs_logit_difference"] <= check["tolerance"] and check["largest_logit"] > 0
    monkeypatch.setattr(export, "APART_ABOVE", 1 << 60)
    export.export_onnx(checkpoints["ner"], tmp_path / "here")
    batch = {"input_ids": np.array([[2, 5, 7, 3]]), "attention_mask": np.ones((1, 4), np.int64)}
    apart, here = OnnxModel(tmp_path / "apart"), OnnxModel(tmp_path / "here")
    np.testing.assert_allclose(apart(**batch).logits, here(**batch).logits, atol=1e-6)
