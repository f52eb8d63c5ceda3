"""Exports run in onnxruntime (dwatt.serving.onnx_runtime): `dwatt predict EXPORT` gives the PyTorch checkpoint's
outputs (fp32 and int8, encoders and decoders) without importing torch, runs each folder in the runtime it was
written for, and refuses a damaged export naming the file."""

import json

import pytest
import torch

from dwatt import DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.cli import main

from .helpers import fresh_copy
from .helpers import with_random_head as trained_like

pytest.importorskip("onnxruntime", reason="the export extra: pip install -e '.[export]'")
pytest.importorskip("onnxscript", reason="the export extra: pip install -e '.[export]'")


LINES = ["peter blackburn [MASK] brussels", "", "eu rejects german [MASK] to boycott british lamb", "[MASK]"]


@pytest.mark.parametrize("task", ["ner", "cls", "mlm"])
def test_dwatt_export_then_predict_with_onnxruntime_gives_the_pytorch_paths_output(
    task, checkpoints, tmp_path, capsys
):
    exported = tmp_path / "onnx"
    # --allow-lossy: the tiny random masked LM's 16-way top token is one an int8 graph may flip on a CPU without VNNI
    # (its activations at half range); the threshold is test_int8_graphs.py's to test, this test compares fp32 paths
    arguments = ["export", str(checkpoints[task]), str(exported), "--format", "onnx", "--quantize", "int8"]
    assert main([*arguments, "--allow-lossy"]) == 0
    assert "onnxruntime's logits within" in capsys.readouterr().out
    config = json.loads((exported / "dwatt_export.json").read_text())
    assert config["task"] == task and config["check"]["max_abs_logit_difference"] <= 1e-4
    assert {"model.onnx", "model_int8.onnx", "dwatt_export.json", "config.json", "tokenizer.json"} <= {
        p.name for p in exported.iterdir()
    }
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
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]


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


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            "replace the graph's weights",
            r"model\.onnx\.data: not the file this export was written with \(its sha256 differs\)",
        ),
        ("another tokenizer", r"tokenizer\.json: not the file this export was written with"),
        ("truncate the int8 graph", r"model_int8\.onnx: not the file this export was written with"),
        ("remove the graph", r"model\.onnx: missing from the export"),
        ("config not JSON", r"dwatt_export\.json:1: not JSON"),
        ("config without graphs", r"dwatt_export\.json: lacks 'graphs'"),
        ("another task", r"model\.onnx: logits of shape .* are not a cls model's; dwatt_export\.json says task 'cls'"),
        ("labels cut to one", r"dwatt_export\.json: id2label needs at least 2 label\(s\)"),
        ("labels of another count", r"model\.onnx: the graph scores 7 labels, dwatt_export\.json's id2label has 3"),
        (
            "a graph path outside the folder",
            r"dwatt_export\.json: graphs\.fp32 is '/etc/passwd'; a graph is a file of the export's own folder",
        ),
        ("a corrupt graph", r"model\.onnx: not the file this export was written with"),
        ("the files' record deleted", r"dwatt_export\.json: lacks 'sha256'; export the checkpoint again"),
        ("labels rotated", r"dwatt_export\.json: id2label .* is not .*config\.json's"),
    ],
)
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
    elif damage == "a corrupt graph":
        (folder / "model.onnx").write_bytes(b"not a graph")
    elif damage == "the files' record deleted":  # no longer taken for an export from before the record: refused
        del config["sha256"]
    elif damage == "labels rotated":
        labels = list(config["id2label"].values())
        config["id2label"] = {key: labels[(i + 1) % len(labels)] for i, key in enumerate(config["id2label"])}
    if damage != "config not JSON":
        config_path.write_text(json.dumps(config))
    assert main(["predict", str(folder), "peter", *quantize]) == 2
    err = capsys.readouterr().err
    import re

    assert re.search(message, err) and len(err.strip().splitlines()) == 1, err
