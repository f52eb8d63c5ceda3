"""Every fusion on every backbone family, encoders and decoder LLMs, on tiny random configs: family x fusion x task.

For each cell: build from a saved backbone, forward, backward, save (full and head-only), reload as remote code in
a process that cannot import dwatt (one process for all cells), and check that the FE cache gives the uncached
logits; padding changes no prediction (on a decoder, on either side). The masked-LM head of each encoder family is
checked against the family's own `AutoModelForMaskedLM`. The support table (docs/backbones.md) and the README's summary
of it
are generated from these parameters (`support_table`, `support_summary`), so they cannot drift.
"""

import json
import textwrap
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

from backbones_dwatt import FAMILIES as FAMILY_RECORDS
from backbones_dwatt import BackboneFamily
from configuration_dwatt import FUSIONS, is_decoder_only
from dwatt import (
    DWAttConfig,
    DWAttForMaskedLM,
    DWAttForSequenceClassification,
    DWAttForTokenClassification,
    DWAttModel,
)
from dwatt.features.build import build_feature_cache
from dwatt.features.cache import FeatureCollator
from dwatt.lora import add_lora, default_targets
from dwatt.training import FreezeBackboneCallback
from lora_dwatt import lora_target_layers

from .conftest import run_without_dwatt
from .families import (
    ALL_FAMILIES,
    DECODERS,
    FAMILIES,
    MATRIX_FUSIONS,
    encoder_config,
    has_mlm_head,
    installed,
    is_decoder,
    refused,
    works,
)
from .families import tasks as tasks_of

TASKS = {"token": DWAttForTokenClassification, "mlm": DWAttForMaskedLM, "cls": DWAttForSequenceClassification}
AUTO = {
    "token": "AutoModelForTokenClassification",
    "mlm": "AutoModelForMaskedLM",
    "cls": "AutoModelForSequenceClassification",
}


# `base:2`: the Base head on layer 2 of 3 instead of the last (`fused_layers="2"`), a probe of one layer.
CELLS = [
    (family, fusion, task)
    for family in ALL_FAMILIES
    for fusion in (*MATRIX_FUSIONS, "base:2")
    for task in tasks_of(family)
    if works(family, fusion)
]
# LoRA on every family: every linear projection of the backbone adapted (its default targets, the family table's
# attention projections, among them), trained a step, saved full (merged) and head-only (the updates beside the
# head), reloaded without dwatt and without peft.
LORA_CELLS = [(family, "dwatt", "token-lora") for family in ALL_FAMILIES]


def projection_names(backbone) -> list[str]:
    """Every name LoRA can target in `backbone`: the last part of the path of each of its linear maps."""
    return sorted({path.rsplit(".", 1)[-1] for path in lora_target_layers(backbone, AnyName())})


class AnyName:
    def __contains__(self, name) -> bool:
        return True


# One worker builds and reads every cell: the module fixture below is minutes of work that a second worker would repeat.
pytestmark = pytest.mark.xdist_group("families")


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
    for family in ALL_FAMILIES:
        if not installed(family):
            continue
        backbone = root / "backbones" / family
        torch.manual_seed(1)
        builder = (
            AutoModelForCausalLM if is_decoder(family) else AutoModelForMaskedLM if has_mlm_head(family) else None
        )
        (builder or __import__("transformers").AutoModel).from_config(encoder_config(family)).save_pretrained(backbone)
    for family, fusion, task in CELLS + LORA_CELLS:
        if not installed(family):
            continue
        torch.manual_seed(2)
        fusion_name, _, layer = fusion.partition(":")
        model = TASKS[task.removesuffix("-lora")].from_backbone(
            str(root / "backbones" / family),
            fusion=fusion_name,
            num_labels=5,
            **({"fused_layers": layer} if layer else {}),
        )
        if task.endswith("-lora"):  # every linear projection adapts (square GPT-2 `Conv1D`s included)
            assert set(default_targets(model)) <= set(projection_names(model.dwatt.backbone))  # the defaults exist
            add_lora(model, rank=2, targets=projection_names(model.dwatt.backbone))
            FreezeBackboneCallback("lora").apply(model)
        labels = torch.randint(0, 5, ids.shape).masked_fill(mask == 0, -100) if task != "cls" else torch.tensor([0, 3])
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        grads = {
            name: p.grad
            for name, p in model.named_parameters()
            if not name.startswith("dwatt.backbone.") or ".lora_" in name
        }
        if not task.endswith("-lora"):
            grads["backbone input embeddings"] = model.dwatt.backbone.get_input_embeddings().weight.grad
        with torch.no_grad():
            for name, parameter in model.named_parameters():  # as if trained, so a silent re-init would show
                if not name.startswith("dwatt.backbone.") or ".lora_" in name:
                    parameter.add_(torch.randn_like(parameter) * 0.05)
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits
        folder = root / "cells" / f"{family}-{fusion}-{task}"
        model.save_pretrained(folder / "full")
        model.save_pretrained(folder / "head", heads_only=True)
        cells[(family, fusion, task)] = dict(model=model, loss=out.loss, grads=grads, logits=logits, folder=folder)
        loads[str(folder / "full")] = loads[str(folder / "head")] = AUTO[task.removesuffix("-lora")]
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
    run_without_dwatt(
        "import sys; sys.modules['peft'] = None  # LoRA checkpoints load without peft\n" + textwrap.dedent(script),
        root,
    )
    return {"cells": cells, "reloaded": torch.load(root / "reloaded.pt"), "ids": ids, "mask": mask, "root": root}


@pytest.mark.parametrize("family, fusion, task", CELLS, ids=["-".join(cell) for cell in CELLS])
def test_fusion_builds_trains_reloads_as_remote_code_and_caches_exactly(saved, family, fusion, task):
    if not installed(family):
        pytest.skip(f"this transformers has no {family!r} model")
    cell = saved["cells"][(family, fusion, task)]
    ids, mask = saved["ids"], saved["mask"]
    shape = (2, 5) if task == "cls" else (2, 7, 99 if task == "mlm" else 5)
    assert cell["logits"].shape == shape and torch.isfinite(cell["loss"])
    missing = [name for name, g in cell["grads"].items() if g is None or not torch.isfinite(g).all()]
    assert not missing, f"no finite gradient for {missing}"
    for kind in ("full", "head"):
        torch.testing.assert_close(saved["reloaded"][str(cell["folder"] / kind)], cell["logits"], atol=1e-5, rtol=0)
    # FE: the backbone's cached layers give the uncached logits (fp32 cache).
    model = cell["model"]
    model.freeze_backbone()
    rows = Dataset.from_dict(
        {
            "input_ids": [row[m.bool()].tolist() for row, m in zip(ids, mask)],
            "attention_mask": [m[m.bool()].tolist() for m in mask],
            "labels": [[0] * int(m.sum()) for m in mask],
        }
    )
    cache = build_feature_cache(model, rows, dtype=torch.float32, progress=False)
    batch = FeatureCollator()([cache[i] for i in range(len(cache))])
    with torch.no_grad():
        cached = model(
            backbone_hidden_states=batch["backbone_hidden_states"], attention_mask=batch["attention_mask"]
        ).logits
    if task == "cls":
        torch.testing.assert_close(cached, cell["logits"], atol=1e-5, rtol=0)
    else:
        torch.testing.assert_close(cached[mask.bool()], cell["logits"][mask.bool()], atol=1e-5, rtol=0)
    # Padding changes nothing (the per-token work skips it): the short sentence alone, padded on the right, and on a
    # decoder (whose positions count from the first real token) on the left too.
    short = ids[1, : int(mask[1].sum())]
    with torch.no_grad():
        alone = model(input_ids=short[None]).logits[0]
        for side in ("left", "right") if is_decoder(family) else ("right",):
            pad = torch.full((3,), model.config.encoder_config.pad_token_id or 0, dtype=torch.long)
            padded = torch.cat([pad, short]) if side == "left" else torch.cat([short, pad])
            place = torch.arange(len(padded))
            keep = place >= len(pad) if side == "left" else place < len(short)
            out = model(input_ids=padded[None], attention_mask=keep.long()[None]).logits[0]
            torch.testing.assert_close(out if task == "cls" else out[keep], alone, atol=1e-5, rtol=0, msg=side)


CUT_CELLS = [cell for cell in CELLS if cell[1] == "base:2"]


@pytest.mark.parametrize("family, fusion, task", CUT_CELLS, ids=["-".join(cell) for cell in CUT_CELLS])
def test_a_head_on_layer_k_runs_the_backbone_through_k_only_with_the_uncut_models_outputs(saved, family, fusion, task):
    """A decoder's hidden state k < L comes before its final norm, its last one after: the cut model reads layer 2 as
    the uncut one does, although layer 2 is its last."""
    if not installed(family):
        pytest.skip(f"this transformers has no {family!r} model")
    cell = saved["cells"][(family, fusion, task)]
    cut = cell["model"]
    assert cut.dwatt.is_cut and cut.dwatt.backbone.config.num_hidden_layers == 2
    assert cut.config.encoder_config.num_hidden_layers == 3
    uncut = (
        TASKS[task]
        .from_backbone(
            str(saved["root"] / "backbones" / family), fusion="base", num_labels=5, fused_layers="2", backbone_depth=3
        )
        .eval()
    )
    uncut.load_state_dict(
        {k: v for k, v in cut.state_dict().items() if not k.startswith("dwatt.backbone.")}, strict=False
    )
    assert not uncut.dwatt.is_cut and uncut.dwatt.backbone.config.num_hidden_layers == 3
    with torch.no_grad():
        expected = uncut(input_ids=saved["ids"], attention_mask=saved["mask"]).logits
    torch.testing.assert_close(cell["logits"], expected, atol=1e-5, rtol=0)
    stored = sum(p.numel() for p in cut.parameters())
    if family == "albert":  # one layer shared across the depth: the cut runs it twice instead of three times
        assert stored == sum(p.numel() for p in uncut.parameters())
    else:
        assert stored < sum(p.numel() for p in uncut.parameters())


@pytest.mark.parametrize("family, fusion, task", LORA_CELLS, ids=["-".join(cell) for cell in LORA_CELLS])
def test_lora_adapts_every_family_and_its_checkpoints_reload_without_dwatt_or_peft(saved, family, fusion, task):
    if not installed(family):
        pytest.skip(f"this transformers has no {family!r} model")
    cell = saved["cells"][(family, fusion, task)]
    model = cell["model"]
    assert model.config.lora["targets"] and any(".lora_A." in name for name, _ in model.named_parameters())
    missing = [
        name for name, g in cell["grads"].items() if ".lora_" in name and (g is None or not torch.isfinite(g).all())
    ]
    assert not missing and any(".lora_" in name for name in cell["grads"]), f"no finite gradient for {missing}"
    real = saved["mask"].bool()
    for kind in ("full", "head"):
        torch.testing.assert_close(
            saved["reloaded"][str(cell["folder"] / kind)][real], cell["logits"][real], atol=1e-5, rtol=0
        )


@pytest.mark.parametrize("family", list(ALL_FAMILIES))
def test_a_backbone_saved_in_bf16_runs_in_bf16_beside_an_fp32_fusion_and_head(saved, family, tmp_path):
    """Most LLM checkpoints are saved in bf16: the backbone runs in it (as transformers 5 loads it), the fusion and head
    train in fp32, near the fp32 backbone's logits; its bf16 cache gives the uncached logits; the checkpoint records
    fp32 (the head's dtype), keeps the backbone's bf16 weights exactly, and reloads whole in fp32 in every release."""
    if not installed(family):
        pytest.skip(f"this transformers has no {family!r} model")
    from transformers import AutoModel

    builder = (
        AutoModelForCausalLM if is_decoder(family) else AutoModelForMaskedLM if has_mlm_head(family) else AutoModel
    )
    builder.from_pretrained(saved["root"] / "backbones" / family).to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"
    ids, mask = saved["ids"], saved["mask"]
    real = mask.bool()
    models = {}
    for name, folder in (("fp32", saved["root"] / "backbones" / family), ("bf16", tmp_path / "bf16")):
        torch.manual_seed(2)
        models[name] = DWAttForTokenClassification.from_backbone(str(folder), fusion="dwatt", num_labels=5)
    half = models["bf16"]
    assert half.dwatt.backbone.dtype == torch.bfloat16 and half.dtype == torch.float32
    assert {p.dtype for name, p in half.named_parameters() if not name.startswith("dwatt.backbone.")} == {
        torch.float32
    }
    loss = half(
        input_ids=ids, attention_mask=mask, labels=torch.randint(0, 5, ids.shape).masked_fill(~real, -100)
    ).loss
    loss.backward()
    assert (
        torch.isfinite(loss)
        and half.classifier.weight.grad is not None
        and torch.isfinite(half.classifier.weight.grad).all()
    )
    half.eval()
    models["fp32"].eval()
    with torch.no_grad():
        logits = half(input_ids=ids, attention_mask=mask).logits
        assert logits.dtype == torch.float32
        exact = models["fp32"](input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(logits[real], exact[real], atol=0.1, rtol=0.05)  # bf16 keeps 8 bits of mantissa
    rows = Dataset.from_dict(
        {
            "input_ids": [row[m].tolist() for row, m in zip(ids, real)],
            "attention_mask": [m[m].long().tolist() for m in real],
            "labels": [[0] * int(m.sum()) for m in real],
        }
    )
    cache = build_feature_cache(half, rows, dtype=torch.bfloat16, progress=False)
    batch = FeatureCollator(dtype=half.dtype)([cache[i] for i in range(len(cache))])
    with torch.no_grad():
        cached = half(
            backbone_hidden_states=batch["backbone_hidden_states"], attention_mask=batch["attention_mask"]
        ).logits
    torch.testing.assert_close(cached[real], logits[real], atol=1e-5, rtol=0)
    half.save_pretrained(tmp_path / "checkpoint")
    assert json.loads((tmp_path / "checkpoint" / "config.json").read_text())["dtype"] == "float32"
    reloaded = DWAttForTokenClassification.from_pretrained(tmp_path / "checkpoint").eval()
    assert {p.dtype for p in reloaded.parameters()} == {torch.float32}
    reloaded.dwatt.backbone.to(torch.bfloat16)  # as `dwatt predict --backbone-dtype bfloat16` runs it
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=ids, attention_mask=mask).logits[real], logits[real], atol=1e-5, rtol=0
        )


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
    real = saved["mask"].bool()  # ours skips the padding positions (zero logits there)
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=0)


def test_a_family_without_base_plus_n_fails_when_the_model_is_built(monkeypatch):
    """No family in FAMILIES needs it today; the refusal is checked on a family marked as unable. The configuration
    knows no family (it imports no torch): the fusion refuses as it is built, before any layer is."""
    unable = BackboneFamily()
    unable.extra_layers_refused = "its layers need inputs the encoder keeps to itself"
    monkeypatch.setitem(FAMILY_RECORDS, "bert", unable)
    config = DWAttConfig(encoder_config=encoder_config("bert"), fusion="base_plus_n")
    with pytest.raises(
        ValueError,
        match=r"'base_plus_n' cannot be built on the 'bert' family .*work here: dwatt, concat, base, scalar_mix",
    ):
        DWAttModel(config)
    DWAttModel(DWAttConfig(encoder_config=encoder_config("bert"), fusion="dwatt"))


def test_decoder_families_are_decoders_and_refuse_masked_lm(tmp_path):
    assert all(is_decoder_only(encoder_config(f)) for f in DECODERS if installed(f))
    assert not any(is_decoder_only(encoder_config(f)) for f in FAMILIES if installed(f))
    with pytest.raises(
        ValueError, match="masked LM needs an encoder: the 'llama' backbone is a causal language model"
    ):
        DWAttForMaskedLM(DWAttConfig(encoder_config=encoder_config("llama")))
    assert DWAttConfig(encoder_config=encoder_config("llama")).pooling == "last"
    assert DWAttConfig(encoder_config=encoder_config("bert")).pooling == "mean"


def support_table() -> str:
    """The support table of docs/backbones.md, from this module's parameters."""
    header = "| family (`model_type`) | attention | " + " | ".join(f"`{f}`" for f in FUSIONS) + " | masked LM |"
    lines = [header, "|" + "---|" * (len(FUSIONS) + 3)]
    for family, (attention, _) in ALL_FAMILIES.items():
        marks = ["yes" if works(family, f) else f"no: {refused(family, f)}" for f in FUSIONS]
        head = "no: a causal LM" if is_decoder(family) else "yes" if has_mlm_head(family) else "no head"
        lines.append(f"| {family} | {attention} | " + " | ".join(marks) + f" | {head} |")
    return "\n".join(lines)


def support_summary() -> str:
    """The README's support matrix, one line per group, from the same parameters."""
    lines = []
    for group, families, tasks in (
        ("Encoders", FAMILIES, "token and sequence classification, masked LM"),
        ("Decoder LLMs", DECODERS, "token and sequence classification"),
    ):
        every = all(works(family, fusion) for family in families for fusion in FUSIONS)
        fusions = "every fusion" if every else "the fusions marked in the full table"
        lines.append(
            f"- **{group}** ({len(families)} families, {fusions}; {tasks}): "
            + ", ".join(f"`{family}`" for family in families)
        )
    return "\n".join(lines)


def generated_block(path: Path, what: str, source: str) -> str:
    text = path.read_text()
    return text.split(f"<!-- {what}: {source} -->\n", 1)[1].split(f"\n<!-- end of {what} -->", 1)[0]


def test_the_support_table_and_summary_are_generated_from_these_tests():
    repo = Path(__file__).resolve().parents[1]
    table = generated_block(repo / "docs" / "backbones.md", "support table", "tests/test_families.py#support_table")
    assert table == support_table(), "docs/backbones.md: replace the support table with\n" + support_table()
    summary = generated_block(repo / "README.md", "support summary", "tests/test_families.py#support_summary")
    assert summary == support_summary(), "README.md: replace the support summary with\n" + support_summary()
