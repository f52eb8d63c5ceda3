"""A model cut at the layer it reads, along the paths a user takes it: saved full and head-only, reloaded (and run
through `pipeline()` as remote code in a process without dwatt), `dwatt predict`, `dwatt export` fp32 and int8, and
shared heads beside an uncut head; on an encoder and a decoder LLM. Cut against uncut logits on every family:
`test_families.py`."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from dwatt import DWAttForTokenClassification
from dwatt.cli import main
from dwatt.model_cards import model_card

from .conftest import run_without_dwatt
from .helpers import with_random_head as trained_like

LINES = ["peter blackburn rejects german call", "eu call to boycott british lamb", "brussels"]


def saved_heads(backbone, root):
    """The same trained-like Base head on layer 2 of 3, cut (the default) and uncut, saved full; a DWAtt head too."""
    torch.manual_seed(0)
    cut = trained_like(
        DWAttForTokenClassification.from_backbone(str(backbone), fusion="base", fused_layers="2", num_labels=5)
    )
    uncut = DWAttForTokenClassification.from_backbone(
        str(backbone), fusion="base", fused_layers="2", num_labels=5, backbone_depth=3
    ).eval()
    uncut.load_state_dict(
        {k: v for k, v in cut.state_dict().items() if not k.startswith("dwatt.backbone.")}, strict=False
    )
    torch.manual_seed(1)
    mixing = trained_like(DWAttForTokenClassification.from_backbone(str(backbone), fusion="dwatt", num_labels=3))
    folders = {}
    for name, model, heads_only in (
        ("cut", cut, False),
        ("cut-head", cut, True),
        ("uncut", uncut, False),
        ("dwatt", mixing, True),
    ):
        model.save_pretrained(root / name, heads_only=heads_only)
        AutoTokenizer.from_pretrained(backbone).save_pretrained(root / name)
        folders[name] = root / name
    return cut, uncut, folders


def predicted(capsys, source, *argv) -> list[dict]:
    capsys.readouterr()
    assert main(["predict", *argv, "--jsonl", str(source), "--quiet"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("backbone_name", ["tiny_backbone", "tiny_decoder"])
def test_a_cut_model_saves_loads_predicts_exports_and_shares_a_backbone_as_the_uncut_one(
    backbone_name, request, tmp_path, capsys
):
    backbone = request.getfixturevalue(backbone_name)
    cut, uncut, folders = saved_heads(backbone, tmp_path)
    stored = {name: set(load_file(folders[name] / "model.safetensors")) for name in ("cut", "uncut")}
    assert stored["cut"] < stored["uncut"]  # the layer past the cut is not stored
    assert "runs layers 1–2 of 3" in model_card(cut) and "runs all 3 layers" in model_card(uncut)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n")
    reference = predicted(capsys, source, str(folders["uncut"]))
    for name in ("cut", "cut-head"):
        assert [row["tags"] for row in predicted(capsys, source, str(folders[name]))] == [
            row["tags"] for row in reference
        ], name
    if (
        backbone_name == "tiny_backbone"
    ):  # PyTorch's dynamic int8, in place; a decoder's is refused (its export's kept)
        int8 = predicted(capsys, source, str(folders["cut"]), "--quantize", "int8")
        assert [len(row["tags"]) for row in int8] == [len(row["tags"]) for row in reference]
    else:
        assert main(["predict", str(folders["cut"]), "--jsonl", str(source), "--quantize", "int8", "--quiet"]) == 2
        assert "loses a decoder LLM's answers" in capsys.readouterr().err
    # Exported, fp32 and int8: the cut graph tags as the uncut model does (fp32), and is smaller.
    for name in ("cut", "uncut"):
        assert main(["export", str(folders[name]), str(tmp_path / f"{name}-onnx"), "--quantize", "int8"]) == 0
    exported = predicted(capsys, source, str(tmp_path / "cut-onnx"))
    assert [row["tags"] for row in exported] == [row["tags"] for row in reference]
    assert len(predicted(capsys, source, str(tmp_path / "cut-onnx"), "--quantize", "int8")) == len(LINES)
    sizes = {name: (tmp_path / f"{name}-onnx" / "model.onnx").stat().st_size for name in ("cut", "uncut")}
    assert sizes["cut"] < sizes["uncut"]
    # Shared heads: one backbone pass as deep as the deepest head (DWAtt reads layer 3), the cut head's tags as alone.
    shared = predicted(capsys, source, "--heads", f"{folders['cut-head']},{folders['dwatt']}")
    alone = predicted(capsys, source, str(folders["dwatt"]))
    assert [row["tags"]["cut-head"] for row in shared] == [row["tags"] for row in reference]
    assert [row["tags"]["dwatt"] for row in shared] == [row["tags"] for row in alone]
    # Remote code through pipeline(), in a process that cannot import dwatt: the cut checkpoints as the uncut one.
    run_without_dwatt(
        f"""
        from transformers import pipeline
        outputs = {{}}
        for name in ("cut", "cut-head", "uncut"):
            tagger = pipeline("token-classification", model={str(tmp_path)!r} + "/" + name, trust_remote_code=True)
            assert tagger.model.dwatt.backbone.config.num_hidden_layers == (3 if name == "uncut" else 2)
            outputs[name] = [[(e["word"], e["entity"], round(e["score"], 4)) for e in entities] for entities in tagger({LINES!r})]
        assert outputs["cut"] == outputs["uncut"] == outputs["cut-head"], outputs
    """,
        tmp_path,
    )


def test_a_cut_head_only_checkpoint_refuses_a_backbone_of_another_depth_though_its_first_layers_fit(
    tiny_backbone, tmp_path
):
    """The cut model loads only the layers it runs, yet a backbone deeper or shallower than the one it was trained on
    is another model: refused, naming both depths."""
    from .conftest import save_tiny_backbone

    torch.manual_seed(0)
    head = DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="base", fused_layers="2", num_labels=5)
    head.save_pretrained(tmp_path / "head", heads_only=True)
    deeper = save_tiny_backbone(tmp_path / "deeper", "bert", num_hidden_layers=4)
    with pytest.raises(ValueError, match=r"not the one this model was built for: num_hidden_layers 4 instead of 3"):
        DWAttForTokenClassification.from_pretrained(tmp_path / "head", backbone_name_or_path=str(deeper))
    assert DWAttForTokenClassification.from_pretrained(tmp_path / "head").dwatt.backbone.config.num_hidden_layers == 2


@pytest.mark.parametrize("fusion", ["scalar_mix", "dwatt", "concat"])
def test_a_fusion_of_only_a_window_of_layers_runs_the_backbone_no_deeper_with_the_uncut_logits(
    fusion, tiny_backbone, tmp_path
):
    """`fused_layers="only:1-2"`: layers 1 and 2 alone (layer 2 where the query and residual read z_L), a backbone of 2
    layers saved and reloaded, the logits of the same fusion on the uncut backbone; `"1-2"` adds the last layer."""
    from dwatt import DWAttConfig

    torch.manual_seed(0)
    cut = trained_like(
        DWAttForTokenClassification.from_backbone(
            str(tiny_backbone), fusion=fusion, num_labels=5, fused_layers="only:1-2"
        )
    )
    uncut = DWAttForTokenClassification.from_backbone(
        str(tiny_backbone), fusion=fusion, num_labels=5, fused_layers="only:1-2", backbone_depth=3
    ).eval()
    uncut.load_state_dict(
        {k: v for k, v in cut.state_dict().items() if not k.startswith("dwatt.backbone.")}, strict=False
    )
    assert cut.config.fused_layer_numbers == [1, 2] and len(cut.dwatt.backbone.encoder.layer) == 2
    with_last = DWAttConfig(encoder_config=cut.config.encoder_config, fusion=fusion, fused_layers="1-2")
    assert with_last.fused_layer_numbers == [1, 2, 3]
    probe = DWAttConfig(encoder_config=cut.config.encoder_config, fusion="base", fused_layers="only:2")
    assert probe.read_layer == 2 and probe.run_depth == 2  # one layer alone: the probe of layer 2, as "2" says
    cut.save_pretrained(tmp_path / "cut")
    reloaded = DWAttForTokenClassification.from_pretrained(tmp_path / "cut").eval()
    assert len(reloaded.dwatt.backbone.encoder.layer) == 2
    batch = {"input_ids": torch.randint(5, 16, (2, 7)), "attention_mask": torch.ones(2, 7, dtype=torch.long)}
    with torch.no_grad():
        expected = uncut(**batch).logits
        torch.testing.assert_close(cut(**batch).logits, expected)
        torch.testing.assert_close(reloaded(**batch).logits, expected)


def test_a_cut_checkpoint_whose_fused_layers_was_edited_shallower_is_refused(tiny_backbone, tmp_path):
    """A head cut at layer 2, its config edited to read layer 1: the stored layer 2 would go unused, silently. Refused,
    naming fused_layers; the checkpoint as saved loads."""
    cut, _, folders = saved_heads(tiny_backbone, tmp_path)
    config_path = folders["cut"] / "config.json"
    config = json.loads(config_path.read_text())
    config["fused_layers"] = "1"
    config_path.write_text(json.dumps(config))
    with pytest.raises(
        ValueError,
        match=r"cut: its weights hold backbone layers 2-2, past the 1 its config runs "
        r"\(fused_layers '1', backbone_depth None\).*restore fused_layers",
    ):
        DWAttForTokenClassification.from_pretrained(folders["cut"])
    config["fused_layers"] = "2"
    config_path.write_text(json.dumps(config))
    assert DWAttForTokenClassification.from_pretrained(folders["cut"]).config.run_depth == 2


@pytest.mark.parametrize("layer", [2, 3])
def test_a_decoder_s_checkpoint_records_family_neutral_classes_and_backbone_depth_at_its_default(
    layer, tiny_decoder, tmp_path
):
    """A Llama-family tagger is no RoBERTa model: config.json and the model card name DWAttForTokenClassification.
    `backbone_depth` is recorded as its docstring says, None at its default (the layer read), at k = L as below it."""
    model = DWAttForTokenClassification.from_backbone(
        str(tiny_decoder), fusion="base", fused_layers=str(layer), num_labels=3
    )
    model.save_pretrained(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "config.json").read_text())
    assert saved["architectures"] == ["DWAttForTokenClassification"] and "Roberta" not in json.dumps(saved["auto_map"])
    assert saved.get("backbone_depth") is None
    assert "Roberta" not in model_card(model)
    reloaded = DWAttForTokenClassification.from_pretrained(tmp_path / "m")
    assert reloaded.config.run_depth == layer and type(reloaded).__name__ == "DWAttForTokenClassification"
