"""Checkpoints saved by earlier model files load with today's, with equal logits (tests/fixtures/make_old_checkpoints.py
wrote them with the code of da01343: full and head-only, LoRA, every fusion, every task)."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import configuration_dwatt
import modeling_dwatt

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints-da01343"
FOLDERS = sorted(path for path in FIXTURES.iterdir() if (path / "expected.safetensors").is_file())
ADDED_SINCE = {"scalar_mix_dropout", "scalar_mix_layer_norm"}


def test_the_fixture_holds_every_fusion_and_task():
    configs = [json.loads((folder / "config.json").read_text()) for folder in FOLDERS]
    # every fusion da01343 had (those declared since have no checkpoint of that code)
    assert {config["fusion"] for config in configs} == set(configuration_dwatt.FUSIONS) - ADDED_SINCE
    assert {config["architectures"][0] for config in configs} == {
        "RobertaDWAttForTokenClassification",
        "RobertaDWAttForSequenceClassification",
        "RobertaDWAttForMaskedLM",
    }
    assert any(config["heads_only"] for config in configs) and any(config["lora"] for config in configs)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda path: path.name)
def test_a_checkpoint_of_da01343_loads_with_equal_logits(folder):
    architecture = json.loads((folder / "config.json").read_text())["architectures"][0]
    model = getattr(modeling_dwatt, architecture).from_pretrained(
        folder, backbone_name_or_path=str(FIXTURES / "backbone")
    )
    expected = load_file(folder / "expected.safetensors")
    with torch.no_grad():
        logits = model.eval()(input_ids=expected["input_ids"], attention_mask=expected["attention_mask"]).logits
    torch.testing.assert_close(logits, expected["logits"], rtol=0, atol=1e-5)
