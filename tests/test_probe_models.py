"""Keeping the probe's choice as models (dwatt.experiment.probe_models): an ensemble member stored cut at its layer or
head-only, with the same outputs. The chosen head and the ensemble saved end to end: tests/test_experiment_probe.py."""

import json

import pytest
import torch


@pytest.mark.parametrize("recorded", ["deeper", "not recorded"])
@pytest.mark.parametrize("whole", [True, False], ids=["whole", "head-only"])
def test_an_ensemble_member_is_stored_cut_at_its_layer_or_head_only_with_the_same_outputs(
    tiny_backbone, tmp_path, recorded, whole
):
    """`store_member`: a head on layer 1 saved with the backbone's 3 layers, its config recording the depth (as an
    encoder's ensemble members were saved) or not (as a decoder's were), is saved again storing layer 1 only (the
    member that carries the ensemble's backbone) or its head only (the others); either loads alone with the outputs
    it had, is left as it is when stored again as asked, and changes part when asked to."""
    from transformers import AutoTokenizer

    from dwatt import DWAttForTokenClassification
    from dwatt.checkpoints import load_checkpoint, stored_keys
    from dwatt.experiment.probe_models import store_member

    torch.manual_seed(0)
    model = DWAttForTokenClassification.from_backbone(
        str(tiny_backbone), fusion="base", fused_layers="1", num_labels=3, backbone_depth=3
    ).eval()
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(folder)
    if recorded == "not recorded":
        config = json.loads((folder / "config.json").read_text())
        config.pop("backbone_depth")
        (folder / "config.json").write_text(json.dumps(config))
    layers = lambda: {key.split(".layer.")[1].split(".")[0] for key in stored_keys(folder) if ".encoder.layer." in key}
    assert layers() == {"0", "1", "2"}
    store_member(folder, whole=whole)
    assert layers() == ({"0"} if whole else set())
    assert any(key.startswith("dwatt.backbone.") for key in stored_keys(folder)) == whole
    batch = {"input_ids": torch.tensor([[2, 5, 6, 7, 3]]), "attention_mask": torch.ones(1, 5, dtype=torch.long)}
    stored, _, _ = load_checkpoint(folder)
    with torch.no_grad():
        torch.testing.assert_close(stored(**batch).logits, model(**batch).logits)
    before = (folder / "model.safetensors").stat().st_mtime_ns
    store_member(folder, whole=whole)  # already stored as asked: left as it is
    assert (folder / "model.safetensors").stat().st_mtime_ns == before
    store_member(folder, whole=not whole)  # the other part (a probe run again chose a deeper or shallower member)
    assert layers() == (set() if whole else {"0"})
    again, _, _ = load_checkpoint(folder)
    with torch.no_grad():
        torch.testing.assert_close(again(**batch).logits, model(**batch).logits)
