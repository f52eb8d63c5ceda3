"""Serving on a CPU: every fusion is one graph (torch.export with dynamic batch and sequence, torch.compile with
fullgraph=True), exports to ONNX with onnxruntime's logits within 1e-4 of PyTorch's on every family, `dwatt export` and
`dwatt predict` on an export give the PyTorch path's tags; an export's files are checked and replaced whole."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from configuration_dwatt import FUSIONS
from dwatt import DWAttConfig, DWAttForMaskedLM, DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.cli import main

from .conftest import save_tiny_backbone
from .families import ALL_FAMILIES, encoder_config, installed, is_decoder, works
from .helpers import padded_batch, with_random_head as trained_like

pytest.importorskip("onnxruntime", reason="the export extra: pip install -e '.[export]'")
pytest.importorskip("onnxscript", reason="the export extra: pip install -e '.[export]'")

# transformers' mixture-of-experts layers run a custom operator (`transformers::grouped_mm_fallback`) that the ONNX
# exporter cannot translate, for transformers' own models as for these: they export with torch.export, not to ONNX.
NO_ONNX = {"mixtral", "qwen2_moe", "qwen3_moe"}
# The families whose extra layers (Base+n) take inputs of their own: relative positions, rotary embeddings, local and
# global attention, sliding windows, another layer list.
OWN_LAYER_INPUTS = ("mpnet", "roformer", "deberta", "deberta-v2", "modernbert", "distilbert", "albert", "gpt2", "gemma2", "qwen2")
# Every fusion on one encoder and one decoder; DWAtt (its layer-by-layer CPU path) on every family; Base+n where a
# family hands its layers inputs of its own. (About 5 s an export: every cell on every family would take 20 minutes.)
GRAPH_CELLS = [(family, fusion) for family in ALL_FAMILIES for fusion in FUSIONS if works(family, fusion) and (
    family in ("bert", "llama") or fusion == "dwatt" or (fusion == "base_plus_n" and family in OWN_LAYER_INPUTS))]
# A head on layer 2 of 3 runs a cut backbone (its last layer's output kept by a forward hook where the family's final
# norm would follow): an encoder, decoders with a final norm of each kind, and an encoder with one.
GRAPH_CELLS += [(family, "base:2") for family in ("bert", "llama", "gpt2", "modernbert")]
ONNX_CELLS = [cell for cell in GRAPH_CELLS if cell[0] not in NO_ONNX]
EXPORT_CELLS = [cell for cell in GRAPH_CELLS if cell[0] in NO_ONNX]


def family_model(family: str, fusion: str):
    """A tiny random model of `family` with `fusion`: a tagger on an encoder, a classifier (last-token pooling) on a
    decoder; trained-like heads, eval mode."""
    task = DWAttForSequenceClassification if is_decoder(family) else DWAttForTokenClassification
    torch.manual_seed(0)
    fusion, _, layer = fusion.partition(":")
    config = DWAttConfig(encoder_config=encoder_config(family), fusion=fusion, num_labels=5, fused_layers=layer or "all")
    return trained_like(task(config))


@pytest.mark.parametrize("family, fusion", EXPORT_CELLS, ids=["-".join(cell) for cell in EXPORT_CELLS])
def test_mixture_of_experts_families_trace_with_torch_export_and_dynamic_axes(family, fusion):
    from torch.export import Dim

    if not installed(family):
        pytest.skip(f"this transformers has no {family!r} model")
    model = family_model(family, fusion)
    axes = {0: Dim("batch", max=64), 1: Dim("sequence", max=60)}
    exported = torch.export.export(model, (), padded_batch(2, 7, seed=1), strict=False,
                                   dynamic_shapes={"input_ids": axes, "attention_mask": axes})
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
    assert write_onnx(model, batch, tmp_path / "model.onnx") <= 1e-4
    other = padded_batch(3, 11, seed=2)  # another batch size and length than the graph was traced with
    other |= {"token_type_ids": torch.zeros_like(other["input_ids"])} if "token_type_ids" in names else {}
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    got = torch.from_numpy(session.run(None, {name: other[name].numpy() for name in names})[0])
    with torch.no_grad():
        expected = model(**other).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("family", ["bert", "llama"])
@pytest.mark.parametrize("fusion", [*FUSIONS, "base:2"])
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
    dims = {"input_ids": {0: Dim("b", max=64), 1: Dim("s", max=60)}, "attention_mask": {0: Dim("b", max=64), 1: Dim("s", max=60)}}
    dims["attention_mask"] = dims["input_ids"]
    exported = torch.export.export(model, (), batch, dynamic_shapes=dims, strict=False)
    with torch.no_grad():
        eager = model(**batch).logits
    torch.testing.assert_close(exported.module()(**batch).logits, eager, atol=1e-6, rtol=0)
    assert (eager[0, 4:] == 0).all()  # padding: zero logits both ways


@pytest.fixture(scope="module")
def checkpoints(tiny_backbone, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("export-checkpoints")
    folders = {}
    mlm_backbone = save_tiny_backbone(root / "mlm-backbone", "bert", vocab_size=16)
    torch.manual_seed(0)
    for task, model in (
        ("ner", DWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=7)),
        ("cls", DWAttForSequenceClassification.from_backbone(str(tiny_backbone), num_labels=3)),
        ("mlm", DWAttForMaskedLM.from_backbone(str(mlm_backbone))),
    ):
        folders[task] = root / task
        trained_like(model).save_pretrained(folders[task], heads_only=task == "ner")  # head-only exports too
        AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(folders[task])
    return folders


LINES = ["peter blackburn [MASK] brussels", "", "eu rejects german [MASK] to boycott british lamb", "[MASK]"]


@pytest.mark.parametrize("task", ["ner", "cls", "mlm"])
def test_dwatt_export_then_predict_with_onnxruntime_gives_the_pytorch_paths_output(task, checkpoints, tmp_path, capsys):
    exported = tmp_path / "onnx"
    assert main(["export", str(checkpoints[task]), str(exported), "--format", "onnx", "--quantize", "int8"]) == 0
    assert "onnxruntime's logits within" in capsys.readouterr().out
    config = json.loads((exported / "dwatt_export.json").read_text())
    assert config["task"] == task and config["check"]["max_abs_logit_difference"] <= 1e-4
    assert {"model.onnx", "model_int8.onnx", "dwatt_export.json", "config.json", "tokenizer.json"} <= {p.name for p in exported.iterdir()}
    assert all(path.stat().st_mode & 0o077 == 0o044 for path in exported.iterdir())  # readable by others, as usual
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n")
    outputs = {}
    for runtime in ("torch", "onnx"):
        folder = exported if runtime == "onnx" else checkpoints[task]
        assert main(["predict", str(folder), "--jsonl", str(tmp_path / "in.txt"), "--quiet"]) == 0
        outputs[runtime] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(outputs["onnx"]) == len(LINES) and outputs["onnx"][1]["line"] == 2
    if task == "ner":
        assert [row["tags"] for row in outputs["onnx"]] == [row["tags"] for row in outputs["torch"]]
    elif task == "cls":
        assert [row["label"] for row in outputs["onnx"]] == [row["label"] for row in outputs["torch"]]
        for onnx_row, torch_row in zip(outputs["onnx"], outputs["torch"]):
            assert list(onnx_row["scores"].values()) == pytest.approx(list(torch_row["scores"].values()), abs=1e-5)
    else:
        tokens = [[[token for token, _ in mask] for mask in row["masks"]] for row in outputs["onnx"]]
        assert tokens == [[[token for token, _ in mask] for mask in row["masks"]] for row in outputs["torch"]]
    assert main(["predict", str(exported), "--jsonl", str(tmp_path / "in.txt"), "--quantize", "int8", "--quiet"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(LINES)  # the int8 graph runs, line for line


def test_a_folder_is_run_by_the_runtime_it_was_written_for(checkpoints, tmp_path, capsys):
    assert main(["export", str(checkpoints["ner"]), str(tmp_path / "onnx")]) == 0
    capsys.readouterr()
    for runtime in ([], ["--runtime", "onnx"]):  # an export runs in onnxruntime, named or not
        assert main(["predict", str(tmp_path / "onnx"), "peter", *runtime]) == 0
        onnx_tags = capsys.readouterr().out
    assert main(["predict", str(checkpoints["ner"]), "peter"]) == 0
    assert capsys.readouterr().out == onnx_tags
    assert main(["predict", str(tmp_path / "onnx"), "peter", "--runtime", "torch"]) == 2
    assert "is an ONNX export; run its checkpoint in PyTorch" in capsys.readouterr().err
    assert main(["predict", str(checkpoints["ner"]), "peter", "--runtime", "onnx"]) == 2
    assert "is not an ONNX export" in capsys.readouterr().err
    assert main(["predict", str(tmp_path / "onnx"), "peter", "--quantize", "int8"]) == 2
    assert "no int8 graph: export it with `dwatt export ... --quantize int8`" in capsys.readouterr().err


@pytest.mark.parametrize("task", ["ner", "cls", "mlm"])
def test_predicting_with_an_export_imports_neither_torch_nor_transformers_models(task, checkpoints, tmp_path):
    """`dwatt predict EXPORT` in a fresh interpreter: onnxruntime, numpy and the tokenizer, no torch (which
    transformers' configuration and model code would import), so that it starts in a fraction of the time."""
    import subprocess
    import sys

    assert main(["export", str(checkpoints[task]), str(tmp_path / "onnx")]) == 0
    script = (
        "import sys\n"
        "from dwatt.cli import main\n"
        f"assert main(['predict', {str(tmp_path / 'onnx')!r}, 'peter [MASK] brussels', 'eu [MASK]']) == 0\n"
        "heavy = sorted(m for m in ('torch', 'transformers.modeling_utils', 'transformers.configuration_utils') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)


@pytest.mark.parametrize("task", ["ner", "cls"])
def test_a_decoder_s_export_encodes_words_and_texts_as_its_checkpoint_does(task, tiny_decoder, tmp_path, capsys):
    """A decoder LLM's byte-level BPE tokenizer without a padding token or a prefix space (the case where words given
    one by one need their running-text space back): the export's tokenizer, loaded without the model's config, gives
    the checkpoint's tags and labels, long lines (windows) included."""
    from dwatt.tokenization import load_tokenizer

    torch.manual_seed(0)
    model_class = DWAttForTokenClassification if task == "ner" else DWAttForSequenceClassification
    trained_like(model_class.from_backbone(str(tiny_decoder), num_labels=5)).save_pretrained(tmp_path / "model")
    load_tokenizer(tiny_decoder).save_pretrained(tmp_path / "model")
    assert main(["export", str(tmp_path / "model"), str(tmp_path / "onnx")]) == 0
    lines = ["Peter Blackburn visited Brussels .", "", " ".join(["The European Commission said on Thursday"] * 60)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    outputs = []
    for folder in ("model", "onnx"):
        assert main(["predict", str(tmp_path / folder), "--jsonl", str(tmp_path / "in.txt"), "--quiet"]) == 0
        outputs.append([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    key = "tags" if task == "ner" else "label"
    assert [row[key] for row in outputs[1]] == [row[key] for row in outputs[0]] and len(outputs[0]) == len(lines)


def test_sentences_may_follow_the_options(checkpoints, capsys):
    assert main(["predict", str(checkpoints["ner"]), "peter", "--batch-size", "2", "eu", "brussels"]) == 0
    words = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert words == ["peter", "eu", "brussels"]
    with pytest.raises(SystemExit):
        main(["predict", str(checkpoints["ner"]), "peter", "--no-such-option"])


@pytest.fixture(scope="module")
def exported_ner(checkpoints, tmp_path_factory):
    """An int8 export of the tiny tagger, copied fresh by each test that damages it."""
    folder = tmp_path_factory.mktemp("exported") / "onnx"
    assert main(["export", str(checkpoints["ner"]), str(folder), "--quantize", "int8"]) == 0
    return folder


def fresh_copy(folder, tmp_path):
    import shutil

    return Path(shutil.copytree(folder, tmp_path / "copy"))


def files_of(folder) -> dict:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_an_export_records_every_file_s_sha256_and_a_re_export_that_fails_leaves_the_old_one(checkpoints, exported_ner, tmp_path, monkeypatch, capsys):
    from dwatt.atomic import sha256_of

    folder = fresh_copy(exported_ner, tmp_path)
    config = json.loads((folder / "dwatt_export.json").read_text())
    assert config["sha256"] == {path.name: sha256_of(path) for path in folder.iterdir() if path.name != "dwatt_export.json"}
    assert {"model.onnx", "model_int8.onnx", "tokenizer.json", "config.json"} <= set(config["sha256"])
    before = files_of(folder)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # what a signal does part-way, after the new fp32 graph is written

    monkeypatch.setattr("dwatt.serving.export.quantize_onnx", killed)
    with pytest.raises(KeyboardInterrupt):
        main(["export", str(checkpoints["cls"]), str(folder), "--quantize", "int8"])
    assert files_of(folder) == before and [p.name for p in tmp_path.iterdir()] == ["copy"]  # no scratch left
    monkeypatch.undo()
    assert main(["export", str(checkpoints["cls"]), str(folder)]) == 0  # a re-export replaces the folder whole
    assert json.loads((folder / "dwatt_export.json").read_text())["task"] == "cls"
    assert not (folder / "model_int8.onnx").exists()
    capsys.readouterr()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    assert main(["export", str(checkpoints["ner"]), str(tmp_path / "mine")]) == 2
    assert "mine: not an export folder (no dwatt_export.json), and exporting would replace it" in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "x"


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
        process = subprocess.Popen([sys.executable, "-m", "dwatt.cli", "export", str(checkpoints["cls"]), str(folder)],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        now = files_of(folder)
        model, _, task = load_export(folder)  # loads, its files checked
        assert now == old or (task == "cls" and "model_int8.onnx" not in now), delay
        outcomes.add("old" if now == old else "new")
    assert "old" in outcomes


@pytest.mark.parametrize("damage, message", [
    ("replace the graph's weights", r"model\.onnx\.data: not the file this export was written with \(its sha256 differs\)"),
    ("another tokenizer", r"tokenizer\.json: not the file this export was written with"),
    ("truncate the int8 graph", r"model_int8\.onnx: not the file this export was written with"),
    ("remove the graph", r"model\.onnx: missing from the export"),
    ("config not JSON", r"dwatt_export\.json:1: not JSON"),
    ("config without graphs", r"dwatt_export\.json: lacks 'graphs'"),
    ("another task", r"model\.onnx: logits of shape .* are not a cls model's; dwatt_export\.json says task 'cls'"),
    ("labels cut to one", r"dwatt_export\.json: id2label needs at least two labels"),
    ("labels of another count", r"model\.onnx: the graph scores 7 labels, dwatt_export\.json's id2label has 3"),
    ("a graph path outside the folder", r"dwatt_export\.json: graphs\.fp32 is '/etc/passwd'; a graph is a file of the export's own folder"),
    ("a corrupt graph without a record", r"model\.onnx: onnxruntime cannot load it"),
])
def test_a_damaged_export_is_refused_naming_the_file(damage, message, exported_ner, tmp_path, capsys):
    folder = fresh_copy(exported_ner, tmp_path)
    config_path = folder / "dwatt_export.json"
    config = json.loads(config_path.read_text())
    quantize = ["--quantize", "int8"] if damage == "truncate the int8 graph" else []
    if damage == "replace the graph's weights":
        data = folder / "model.onnx.data"
        data.write_bytes(bytes(len(data.read_bytes())))
    elif damage == "another tokenizer":
        tokenizer = json.loads((folder / "tokenizer.json").read_text())
        vocabulary = tokenizer["model"]["vocab"]
        first, second = list(vocabulary)[5:7]
        vocabulary[first], vocabulary[second] = vocabulary[second], vocabulary[first]
        (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    elif damage == "truncate the int8 graph":
        graph = folder / "model_int8.onnx"
        graph.write_bytes(graph.read_bytes()[:100])
    elif damage == "remove the graph":
        (folder / "model.onnx").unlink()
    elif damage == "config not JSON":
        config_path.write_text("{")
    elif damage == "config without graphs":
        del config["graphs"]
    elif damage == "another task":
        config["task"] = "cls"
    elif damage == "labels cut to one":
        config["id2label"] = {"0": "O"}
    elif damage == "labels of another count":
        config["id2label"] = {"0": "O", "1": "B-PER", "2": "I-PER"}
    elif damage == "a graph path outside the folder":
        config["graphs"]["fp32"] = "/etc/passwd"
    elif damage == "a corrupt graph without a record":
        del config["sha256"]  # an export written before files were recorded
        (folder / "model.onnx").write_bytes(b"not a graph")
    if damage != "config not JSON":
        config_path.write_text(json.dumps(config))
    assert main(["predict", str(folder), "peter", *quantize]) == 2
    err = capsys.readouterr().err
    import re

    assert re.search(message, err) and len(err.strip().splitlines()) == 1, err


def test_non_finite_weights_are_not_exported(checkpoints, tmp_path, capsys):
    from safetensors.torch import load_file, save_file
    import shutil

    broken = Path(shutil.copytree(checkpoints["cls"], tmp_path / "nan"))
    weights = load_file(str(broken / "model.safetensors"))
    weights = {key: torch.full_like(value, float("nan")) if key.startswith(("classifier", "out_proj")) else value for key, value in weights.items()}
    save_file(weights, str(broken / "model.safetensors"), metadata={"format": "pt"})
    assert main(["export", str(broken), str(tmp_path / "onnx")]) == 2
    assert "its logits on the check batch are not finite" in capsys.readouterr().err
    assert not (tmp_path / "onnx").exists()
