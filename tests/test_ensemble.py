"""A probe ensemble served as one model (dwatt.serving.ensemble): its logits are the log of its members' mean
probabilities, each member as it runs alone, on one backbone pass; int8 quantizes the shared backbone once and keeps
the
heads; it exports to one ONNX graph that `dwatt predict` runs like the ensemble; members of another task or label set
and
a member that is not there are refused with the place named. Saved by `dwatt probe --save-ensemble`:
test_experiment_probe; pushed to the Hub and run by its id: test_hub."""

import json
import re

import pytest
import torch

from dwatt import DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.checkpoints import is_ensemble, write_ensemble
from dwatt.serving.ensemble import load_ensemble

from .helpers import ENSEMBLE_LABELS as LABELS
from .helpers import an_ensemble
from .helpers import saved_with_tokenizer as saved


@pytest.mark.parametrize("task", ["ner", "cls"])
def test_the_ensemble_s_logits_are_the_log_of_its_members_mean_probabilities(task, tiny_backbone, tmp_path):
    torch.manual_seed(0)
    build = DWAttForTokenClassification if task == "ner" else DWAttForSequenceClassification
    members = [
        build.from_backbone(str(tiny_backbone), fusion="base", fused_layers=str(layer), id2label=LABELS)
        for layer in (2, 1)
    ]
    for member, layer in zip(members, (2, 1)):
        saved(member, tmp_path / f"layer-{layer}" / "model", tiny_backbone)
    write_ensemble(tmp_path, ["layer-2/model", "layer-1/model"], {"task": task})
    assert is_ensemble(tmp_path) and not is_ensemble(tmp_path / "layer-2" / "model")
    model, tokenizer, loaded_task = load_ensemble(tmp_path)
    assert loaded_task == task and model.config.id2label == LABELS
    batch = tokenizer(["peter blackburn rejects", "eu"], padding=True, return_tensors="pt")
    with torch.no_grad():
        alone = [member.eval()(**batch).logits.softmax(-1) for member in members]
        torch.testing.assert_close(model(**batch).logits, torch.stack(alone).mean(0).log())


def test_int8_quantizes_the_shared_backbone_once_and_keeps_every_member_s_head(tiny_backbone, tmp_path):
    from torch.ao.nn.quantized import dynamic as dynamic_quantized

    from dwatt.serving.quantization import quantize_int8

    model, tokenizer, _ = load_ensemble(an_ensemble("ner", tiny_backbone, tmp_path))
    batch = tokenizer(["peter blackburn rejects", "eu"], padding=True, return_tensors="pt")
    with torch.no_grad():
        fp32 = model(**batch).logits
        int8 = quantize_int8(model, full_range=True)(**batch).logits
    kinds = {
        name: type(module)
        for name, module in model.named_modules(remove_duplicate=False)
        if isinstance(module, (torch.nn.Linear, dynamic_quantized.Linear))
    }
    backbone = {name for name in kinds if ".backbone." in name or name.startswith("heads.backbone.")}
    assert backbone and all(kinds[name] is not torch.nn.Linear for name in backbone)  # every copy's view of it
    assert [name for name, kind in kinds.items() if kind is torch.nn.Linear] == [
        "heads.heads.layer-2/model.classifier",
        "heads.heads.layer-1/model.classifier",
    ]
    real = batch["attention_mask"].bool()
    assert 0 < (int8 - fp32)[real].abs().max() < 0.05 * fp32[real].abs().max()


@pytest.mark.parametrize("task", ["ner", "cls"])
def test_an_ensemble_exports_to_one_graph_that_predicts_as_the_ensemble_does(task, tiny_backbone, tmp_path, capsys):
    pytest.importorskip("onnxruntime", reason="the export extra: pip install -e '.[export]'")
    pytest.importorskip("onnxscript", reason="the export extra: pip install -e '.[export]'")
    from dwatt.cli import main

    folder = an_ensemble(task, tiny_backbone, tmp_path / "ensemble")
    assert main(["export", str(folder), str(tmp_path / "onnx"), "--quantize", "int8"]) == 0
    assert f"({task}, a probe ensemble of 2 heads)" in capsys.readouterr().out
    export = json.loads((tmp_path / "onnx" / "dwatt_export.json").read_text())
    assert export["architecture"] == "AveragedHeads" and export["task"] == task
    assert export["ensemble"]["members"] == ["layer-2/model", "layer-1/model"] and export["ensemble"]["k"] == 2
    texts = tmp_path / "texts.txt"
    texts.write_text("peter blackburn rejects the call\neu\n")
    printed = {}
    for name, source, quantize in [
        ("torch", folder, []),
        ("onnx", tmp_path / "onnx", []),
        ("onnx-int8", tmp_path / "onnx", ["--quantize", "int8"]),
        ("torch-int8", folder, ["--quantize", "int8"]),
    ]:
        assert main(["predict", str(source), "--file", str(texts), "--quiet", *quantize]) == 0
        printed[name] = capsys.readouterr().out
    assert printed["onnx"] == printed["torch"] and "O" in printed["torch"]  # fp32: the same labels
    assert printed["onnx-int8"].count("\n") == printed["torch-int8"].count("\n") == printed["torch"].count("\n")


def test_members_of_other_labels_and_a_missing_member_are_refused(tiny_backbone, tmp_path):
    saved(
        DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="base", id2label=LABELS),
        tmp_path / "a",
        tiny_backbone,
    )
    other = {0: "O", 1: "B-LOC", 2: "I-LOC"}
    saved(
        DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="base", id2label=other),
        tmp_path / "b",
        tiny_backbone,
    )
    write_ensemble(tmp_path, ["a", "b"], {})
    with pytest.raises(
        ValueError, match=r"one task and label set: b is a DWAttForTokenClassification with labels \['O', 'B-LOC'"
    ):
        load_ensemble(tmp_path)
    write_ensemble(tmp_path, ["a", "gone"], {})
    with pytest.raises(FileNotFoundError, match=r"ensemble\.json: the member .*gone has no checkpoint"):
        load_ensemble(tmp_path)
    (tmp_path / "ensemble.json").write_text(json.dumps({"members": "a"}))
    with pytest.raises(ValueError, match=r"ensemble\.json: 'members' must be a list"):
        load_ensemble(tmp_path)


def test_a_member_without_its_weights_is_one_line_naming_the_file(tiny_backbone, tmp_path, capsys):
    """Not transformers' message about model.safetensors.index.json and a Hub address: the member's weights file."""
    from dwatt.cli import main

    for name in ("a", "b"):
        saved(
            DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="base", id2label=LABELS),
            tmp_path / name,
            tiny_backbone,
        )
    write_ensemble(tmp_path, ["a", "b"], {})
    (tmp_path / "b" / "model.safetensors").unlink()
    capsys.readouterr()
    assert main(["predict", str(tmp_path), "peter"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(
        r"b/model\.safetensors: missing; the member b of .*ensemble\.json has no weights", err[0]
    ), err
    assert "index.json" not in err[0] and "http" not in err[0]
