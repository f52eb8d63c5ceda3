"""A probe ensemble served as one model (dwatt.serving.ensemble): its logits are the log of its members' mean
probabilities, each member as it runs alone, on one backbone pass; members of another task or label set and a member
that is not there are refused with the place named. Saved by `dwatt probe --save-ensemble`: test_experiment_probe."""

import json

import pytest
import torch
from transformers import AutoTokenizer

from dwatt import DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.serving.ensemble import is_ensemble, load_ensemble, write_ensemble

from .helpers import with_random_head

LABELS = {0: "O", 1: "B-PER", 2: "I-PER"}


def saved(model, folder, backbone):
    with_random_head(model).save_pretrained(folder)
    AutoTokenizer.from_pretrained(backbone).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("task", ["ner", "cls"])
def test_the_ensemble_s_logits_are_the_log_of_its_members_mean_probabilities(task, tiny_backbone, tmp_path):
    torch.manual_seed(0)
    build = DWAttForTokenClassification if task == "ner" else DWAttForSequenceClassification
    members = [build.from_backbone(str(tiny_backbone), fusion="base", layers=str(layer), id2label=LABELS)
               for layer in (2, 1)]
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


def test_members_of_other_labels_and_a_missing_member_are_refused(tiny_backbone, tmp_path):
    saved(DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="base", id2label=LABELS), tmp_path / "a", tiny_backbone)
    other = {0: "O", 1: "B-LOC", 2: "I-LOC"}
    saved(DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="base", id2label=other), tmp_path / "b", tiny_backbone)
    write_ensemble(tmp_path, ["a", "b"], {})
    with pytest.raises(ValueError, match=r"one task and label set: b is a RobertaDWAttForTokenClassification with labels \['O', 'B-LOC'"):
        load_ensemble(tmp_path)
    write_ensemble(tmp_path, ["a", "gone"], {})
    with pytest.raises(FileNotFoundError, match=r"ensemble\.json: the member .*gone has no checkpoint"):
        load_ensemble(tmp_path)
    (tmp_path / "ensemble.json").write_text(json.dumps({"members": "a"}))
    with pytest.raises(ValueError, match=r"ensemble\.json: 'members' must be a list"):
        load_ensemble(tmp_path)
