"""Every fusion on every encoder family, on tiny random configs: family x fusion x task.

For each cell: build from a saved backbone, forward, backward, save (full and head-only), reload as remote code in
a process that cannot import dwatt (one process for all cells), and check that the FE cache gives the uncached
logits. The masked-LM head of each family is checked against the family's own `AutoModelForMaskedLM`. The README's
support table is generated from these parameters (`support_table`), so it cannot drift.
"""

import json
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import AutoConfig, AutoModelForMaskedLM
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

from configuration_dwatt import FUSIONS, BASE_PLUS_N_UNSUPPORTED
from dwatt import DWAttConfig, DWAttForMaskedLM, DWAttForTokenClassification
from dwatt.features import FeatureCollator, build_feature_cache

from .conftest import run_without_dwatt

TINY = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37, vocab_size=99,
            max_position_embeddings=64, pad_token_id=1)
DEBERTA_RELATIVE = dict(relative_attention=True, pos_att_type=["c2p", "p2c"], max_relative_positions=16)
# The families, with what their tiny config needs beyond TINY (their own position scheme switched on).
FAMILIES = {
    "bert": {},
    "roberta": {},
    "xlm-roberta": {},
    "camembert": {},
    "mpnet": {},
    "deberta": DEBERTA_RELATIVE,
    "deberta-v2": DEBERTA_RELATIVE | dict(position_buckets=8, norm_rel_ebd="layer_norm", share_att_key=True,
                                          position_biased_input=False),  # DeBERTa-v3's settings
    "modernbert": dict(pad_token_id=0, bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3,
                       global_attn_every_n_layers=2, local_attention=4),
    "electra": dict(embedding_size=16),
    "distilbert": dict(hidden_dim=37),
    "albert": dict(embedding_size=16),
    "xlm-roberta-xl": {},
    "ernie": {},
    "data2vec-text": {},
    "megatron-bert": {},
    "roformer": {},
}
# Not here: ConvBERT (its convolutions read padding positions, so a sentence's outputs depend on how it is padded
# and no unpadded FE cache can equal them), Longformer and BigBird (sparse attention with their own mask formats).
TASKS = {"token": DWAttForTokenClassification, "mlm": DWAttForMaskedLM}
AUTO = {"token": "AutoModelForTokenClassification", "mlm": "AutoModelForMaskedLM"}


def installed(family: str) -> bool:
    return family in MODEL_MAPPING_NAMES


def has_mlm_head(family: str) -> bool:
    return family in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def works(family: str, fusion: str) -> bool:
    return not (fusion == "base_plus_n" and family in BASE_PLUS_N_UNSUPPORTED)


CELLS = [
    (family, fusion, task)
    for family in FAMILIES
    for fusion in FUSIONS
    for task in TASKS
    if works(family, fusion) and (task == "token" or has_mlm_head(family))
]


def encoder_config(family: str):
    return AutoConfig.for_model(family, **(TINY | FAMILIES[family]))


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """Every cell built from a saved tiny backbone of its family, trained a step, saved full and head-only, then
    reloaded through `trust_remote_code=True` in one process that cannot import dwatt."""
    root = tmp_path_factory.mktemp("families")
    torch.manual_seed(0)
    ids = torch.randint(5, 99, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    torch.save({"ids": ids, "mask": mask}, root / "inputs.pt")
    cells, loads = {}, {}
    for family in FAMILIES:
        if not installed(family):
            continue
        backbone = root / "backbones" / family
        torch.manual_seed(1)
        builder = AutoModelForMaskedLM if has_mlm_head(family) else __import__("transformers").AutoModel
        builder.from_config(encoder_config(family)).save_pretrained(backbone)
    for family, fusion, task in CELLS:
        if not installed(family):
            continue
        torch.manual_seed(2)
        model = TASKS[task].from_backbone(str(root / "backbones" / family), fusion=fusion, num_labels=5)
        labels = torch.randint(0, 5, ids.shape).masked_fill(mask == 0, -100)
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        grads = {name: p.grad for name, p in model.named_parameters() if not name.startswith("dwatt.backbone.")}
        grads["backbone input embeddings"] = model.dwatt.backbone.get_input_embeddings().weight.grad
        with torch.no_grad():
            for name, parameter in model.named_parameters():  # as if trained, so a silent re-init would show
                if not name.startswith("dwatt.backbone."):
                    parameter.add_(torch.randn_like(parameter) * 0.05)
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits
        folder = root / "cells" / f"{family}-{fusion}-{task}"
        model.save_pretrained(folder / "full")
        model.save_pretrained(folder / "head", heads_only=True)
        cells[(family, fusion, task)] = dict(model=model, loss=out.loss, grads=grads, logits=logits, folder=folder)
        loads[str(folder / "full")] = loads[str(folder / "head")] = AUTO[task]
    script = f"""
        import json, torch, transformers
        inputs = torch.load({str(root / "inputs.pt")!r})
        out = {{}}
        for folder, auto in json.loads({json.dumps(loads)!r}).items():
            model = getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True).eval()
            with torch.no_grad():
                out[folder] = model(input_ids=inputs["ids"], attention_mask=inputs["mask"]).logits
        torch.save(out, {str(root / "reloaded.pt")!r})
    """
    run_without_dwatt(script, root)
    return {"cells": cells, "reloaded": torch.load(root / "reloaded.pt"), "ids": ids, "mask": mask, "root": root}


@pytest.mark.parametrize("family, fusion, task", CELLS, ids=["-".join(cell) for cell in CELLS])
def test_fusion_builds_trains_reloads_as_remote_code_and_caches_exactly(saved, family, fusion, task):
    if not installed(family):
        pytest.skip(f"this transformers has no {family!r} model")
    cell = saved["cells"][(family, fusion, task)]
    ids, mask = saved["ids"], saved["mask"]
    width = 5 if task == "token" else 99
    assert cell["logits"].shape == (2, 7, width) and torch.isfinite(cell["loss"])
    missing = [name for name, g in cell["grads"].items() if g is None or not torch.isfinite(g).all()]
    assert not missing, f"no finite gradient for {missing}"
    for kind in ("full", "head"):
        torch.testing.assert_close(saved["reloaded"][str(cell["folder"] / kind)], cell["logits"], atol=1e-5, rtol=0)
    # FE: the backbone's cached layers give the uncached logits (fp32 cache).
    model = cell["model"]
    model.freeze_backbone()
    rows = Dataset.from_dict({"input_ids": [row[m.bool()].tolist() for row, m in zip(ids, mask)],
                              "attention_mask": [m[m.bool()].tolist() for m in mask],
                              "labels": [[0] * int(m.sum()) for m in mask]})
    cache = build_feature_cache(model, rows, dtype=torch.float32, progress=False)
    batch = FeatureCollator()([cache[i] for i in range(len(cache))])
    with torch.no_grad():
        cached = model(backbone_hidden_states=batch["backbone_hidden_states"], attention_mask=batch["attention_mask"]).logits
    torch.testing.assert_close(cached[mask.bool()], cell["logits"][mask.bool()], atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", [f for f in FAMILIES if has_mlm_head(f)])
def test_masked_lm_head_is_the_familys_own(saved, family):
    """With the `base` fusion the DWAtt masked LM is exactly the family's pretrained masked-LM model."""
    if not installed(family):
        pytest.skip(f"this transformers has no {family!r} model")
    backbone = saved["root"] / "backbones" / family
    ours = DWAttForMaskedLM.from_backbone(str(backbone), fusion="base").eval()
    theirs = AutoModelForMaskedLM.from_pretrained(backbone).eval()
    with torch.no_grad():
        expected = theirs(input_ids=saved["ids"], attention_mask=saved["mask"]).logits
        got = ours(input_ids=saved["ids"], attention_mask=saved["mask"]).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_a_family_without_base_plus_n_fails_when_the_config_is_built(monkeypatch):
    """No family in FAMILIES needs it today; the refusal is checked on a family marked as unable."""
    monkeypatch.setitem(BASE_PLUS_N_UNSUPPORTED, "bert", "its layers need inputs the encoder keeps to itself")
    with pytest.raises(ValueError, match=r"'base_plus_n' cannot be built on the 'bert' family .*work here: dwatt, concat, base, scalar_mix"):
        DWAttConfig(encoder_config=encoder_config("bert"), fusion="base_plus_n")
    DWAttConfig(encoder_config=encoder_config("bert"), fusion="dwatt")


def support_table() -> str:
    """The README's support table, from this module's parameters."""
    header = "| family (`model_type`) | " + " | ".join(f"`{f}`" for f in FUSIONS) + " | masked LM |"
    lines = [header, "|" + "---|" * (len(FUSIONS) + 2)]
    for family in FAMILIES:
        marks = ["yes" if works(family, f) else f"no: {BASE_PLUS_N_UNSUPPORTED[family]}" for f in FUSIONS]
        lines.append(f"| {family} | " + " | ".join(marks) + f" | {'yes' if has_mlm_head(family) else 'no head'} |")
    return "\n".join(lines)


def test_readme_support_table_is_generated_from_these_tests():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("<!-- support table: tests/test_families.py -->\n", 1)[1].split("\n<!-- end of support table -->", 1)[0]
    assert block == support_table(), "README.md: replace the support table with\n" + support_table()
