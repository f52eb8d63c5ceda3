"""`dwatt export --format transformers` (dwatt.serving.stock_export): a tagger's head on one layer as its family's
stock `<Family>ForTokenClassification`, loaded without remote code and without dwatt, giving the checkpoint's logits
and `dwatt predict`'s tags; everything else refused in one line that says why."""

import json

import pytest
import torch
from transformers import AutoTokenizer

from dwatt import DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.cli import main

from .conftest import run_without_dwatt
from .helpers import with_random_head as trained_like

LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "B-ORG"}


def saved_tagger(backbone, folder, **config):
    torch.manual_seed(0)
    model = DWAttForTokenClassification.from_backbone(str(backbone), num_labels=5, id2label=LABELS, **config)
    trained_like(model).save_pretrained(folder)
    AutoTokenizer.from_pretrained(backbone).save_pretrained(folder)
    return folder


def test_a_head_on_layer_k_exports_as_the_stock_tagger_cut_to_k(tiny_backbone, tmp_path, capsys):
    checkpoint = saved_tagger(tiny_backbone, tmp_path / "model", fusion="base", fused_layers="2")
    assert main(["export", str(checkpoint), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    assert "as a stock BertForTokenClassification (layer 2 of 3; no remote code)" in capsys.readouterr().out
    config = json.loads((tmp_path / "stock" / "config.json").read_text())
    assert config["model_type"] == "bert" and config["num_hidden_layers"] == 2 and "auto_map" not in config
    assert config["architectures"] == ["BertForTokenClassification"] and config["id2label"]["1"] == "B-PER"
    assert not list((tmp_path / "stock").glob("*_dwatt.py"))
    record = json.loads((tmp_path / "stock" / "dwatt_stock_export.json").read_text())
    assert record["check"]["max_abs_logit_difference"] <= record["check"]["tolerance"]
    text = "peter blackburn rejects brussels eu call"
    (tmp_path / "in.txt").write_text(text + "\n")
    assert main(["predict", str(checkpoint), "--jsonl", str(tmp_path / "in.txt"), "--quiet"]) == 0
    tags = json.loads(capsys.readouterr().out)["tags"]
    assert len(set(tags)) > 2  # a head that tells words apart: the comparison below can fail
    # a process without dwatt and with remote code refused: transformers' own pipeline tags the words alike
    run_without_dwatt(
        f"""
        import json
        from transformers import pipeline
        tagger = pipeline("token-classification", model={str(tmp_path / "stock")!r}, trust_remote_code=False,
                          aggregation_strategy="none")
        found = tagger({text!r})
        # the pipeline leaves "O" out; every other word's label must be dwatt's
        tags = {tags!r}
        words = {text.split()!r}
        for entity in found:
            assert tags[words.index(entity["word"])] == entity["entity"], (entity, tags)
        assert len(found) == sum(tag != "O" for tag in tags), (found, tags)
        """,
        tmp_path,
    )


def test_a_head_on_the_embedding_output_exports_as_the_stock_tagger_with_no_layer(tiny_backbone, tmp_path, capsys):
    """Layer 0 (a probe's floor, which it may choose): the checkpoint keeps the backbone's first layer unread; the
    stock tagger holds none, its classifier reading the embedding output, with the checkpoint's logits."""
    checkpoint = saved_tagger(tiny_backbone, tmp_path / "model", fusion="base", fused_layers="0")
    assert main(["export", str(checkpoint), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    assert "as a stock BertForTokenClassification (layer 0 of 3; no remote code)" in capsys.readouterr().out
    assert json.loads((tmp_path / "stock" / "config.json").read_text())["num_hidden_layers"] == 0
    record = json.loads((tmp_path / "stock" / "dwatt_stock_export.json").read_text())
    assert record["check"]["max_abs_logit_difference"] <= record["check"]["tolerance"]


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda backbone, folder: saved_tagger(backbone, folder, fusion="dwatt"), "reads the DWAtt fusion of several"),
        (lambda backbone, folder: saved_tagger(backbone, folder, fusion="base", include_embeddings=True), "embedding"),
    ],
)
def test_what_no_stock_architecture_computes_is_refused_in_one_line(tiny_backbone, tmp_path, capsys, make, why):
    checkpoint = make(tiny_backbone, tmp_path / "model")
    assert main(["export", str(checkpoint), str(tmp_path / "stock"), "--format", "transformers"]) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if line and "it/s]" not in line]
    assert len(error) == 1 and why in error[0] and "no stock transformers model" in error[0], (
        error
    )  # transformers' bars aside
    assert not (tmp_path / "stock").exists()


def test_a_classifier_and_a_decoder_s_head_are_refused(tiny_backbone, tiny_decoder, tmp_path, capsys):
    model = DWAttForSequenceClassification.from_backbone(str(tiny_backbone), fusion="base", num_labels=3)
    model.save_pretrained(tmp_path / "cls")
    AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(tmp_path / "cls")
    assert main(["export", str(tmp_path / "cls"), str(tmp_path / "a"), "--format", "transformers"]) == 2
    assert "a cls head has no stock transformers class" in capsys.readouterr().err
    decoder = saved_tagger(tiny_decoder, tmp_path / "decoder", fusion="base", fused_layers="1")
    assert main(["export", str(decoder), str(tmp_path / "b"), "--format", "transformers"]) == 2
    assert "apply the backbone's final norm after layer 1" in capsys.readouterr().err
    assert main(["export", str(decoder), str(tmp_path / "b"), "--format", "transformers", "--quantize", "int8"]) == 2
    assert "--quantize, --calibration and --allow-lossy are for --format onnx" in capsys.readouterr().err
