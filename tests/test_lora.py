"""LoRA on the backbone under a fusion head: PEFT's adapters in training, checkpoints that load without peft (the
updates merged in plain torch) and equal the trained model, the refusals, and the CLI in LoRA mode."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from dwatt import DWAttForMaskedLM, DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.cli import main
from dwatt.lora import add_lora, default_targets
from dwatt.training import FreezeBackboneCallback
from pretrained_dwatt import merged_lora_state_dict

from .conftest import BLOCKED_IMPORTS, save_tiny_backbone

# As if peft were not installed: `import peft` fails and transformers' `find_spec("peft")` finds nothing.
BLOCKED_PEFT = BLOCKED_IMPORTS + "\nsys.modules['peft'] = None\n"


def inputs():
    torch.manual_seed(9)
    ids = torch.randint(5, 16, (3, 8))
    mask = torch.ones_like(ids)
    mask[1, 5:] = mask[2, 3:] = 0
    return ids, mask


def adapted(model, rank: int = 4, targets: list[str] | None = None):
    """`model` with LoRA adapters, trained a little: random non-zero updates (B starts at zero) and head."""
    add_lora(model, rank=rank, alpha=8, dropout=0.1, targets=targets)
    FreezeBackboneCallback("lora").apply(model)
    torch.manual_seed(3)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(torch.randn_like(parameter) * 0.2)
    return model.eval()


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    return save_tiny_backbone(tmp_path_factory.mktemp("tiny-bert-lora"), "bert", vocab_size=16)


@pytest.mark.parametrize("cls", [DWAttForTokenClassification, DWAttForSequenceClassification, DWAttForMaskedLM])
def test_a_reloaded_head_only_or_full_checkpoint_equals_the_trained_unmerged_model(cls, backbone, tmp_path):
    torch.manual_seed(0)
    model = adapted(
        cls.from_backbone(str(backbone), fusion="dwatt", **({} if cls is DWAttForMaskedLM else {"num_labels": 3}))
    )
    ids, mask = inputs()
    with torch.no_grad():
        trained = model(input_ids=ids, attention_mask=mask).logits
    model.save_pretrained(tmp_path / "head", heads_only=True)
    model.save_pretrained(tmp_path / "full")
    for kind in ("head", "full"):
        reloaded = cls.from_pretrained(tmp_path / kind).eval()
        assert reloaded.config.lora["merged"] and reloaded.config.lora["rank"] == 4
        assert not any("lora" in name for name, _ in reloaded.dwatt.backbone.named_parameters())  # plain, merged
        with torch.no_grad():
            again = reloaded(input_ids=ids, attention_mask=mask).logits
        real = mask.bool() if again.dim() == 3 else slice(None)
        torch.testing.assert_close(again[real], trained[real], atol=1e-5, rtol=0, msg=kind)
    # The adapters changed the model: without them it predicts otherwise.
    plain = cls.from_backbone(str(backbone), fusion="dwatt", **({} if cls is DWAttForMaskedLM else {"num_labels": 3}))
    plain.load_state_dict(
        {k: v for k, v in merged_lora_state_dict(model).items() if not k.startswith("dwatt.backbone.")}, strict=False
    )
    with torch.no_grad():
        assert (
            plain.eval()(input_ids=ids, attention_mask=mask).logits[mask.bool() if trained.dim() == 3 else slice(None)]
            - trained[mask.bool() if trained.dim() == 3 else slice(None)]
        ).abs().max() > 1e-3


def test_a_head_only_checkpoint_holds_the_head_and_the_low_rank_matrices_only(backbone, tmp_path):
    torch.manual_seed(0)
    model = adapted(DWAttForTokenClassification.from_backbone(str(backbone), num_labels=3))
    model.save_pretrained(tmp_path / "head", heads_only=True)
    tensors = load_file(tmp_path / "head" / "model.safetensors")
    assert not any(key.startswith("dwatt.backbone.") for key in tensors)
    updates = sorted(key for key in tensors if key.startswith("dwatt.lora."))
    assert len(updates) == 3 * 2 * 2  # 3 layers x query, value x A, B
    assert tensors["dwatt.lora.updates.encoder__layer__0__attention__self__query.lora_A"].shape == (4, 32)
    config = json.loads((tmp_path / "head" / "config.json").read_text())
    assert config["lora"] == {"rank": 4, "alpha": 8.0, "dropout": 0.1, "targets": ["query", "value"], "merged": False}


def test_lora_checkpoints_load_where_neither_dwatt_nor_peft_can_be_imported(backbone, tmp_path):
    torch.manual_seed(0)
    model = adapted(DWAttForTokenClassification.from_backbone(str(backbone), num_labels=3))
    ids, mask = inputs()
    with torch.no_grad():
        torch.save(
            {"ids": ids, "mask": mask, "logits": model(input_ids=ids, attention_mask=mask).logits}, tmp_path / "x.pt"
        )
    model.save_pretrained(tmp_path / "head", heads_only=True)
    model.save_pretrained(tmp_path / "full")
    script = f"""
        import torch
        from transformers import AutoModelForTokenClassification
        try:
            import peft
            raise SystemExit("peft is importable")
        except ImportError:
            pass
        x = torch.load({str(tmp_path / "x.pt")!r})
        for kind in ("head", "full"):
            model = AutoModelForTokenClassification.from_pretrained({str(tmp_path)!r} + "/" + kind, trust_remote_code=True).eval()
            with torch.no_grad():
                got = model(input_ids=x["ids"], attention_mask=x["mask"]).logits
            real = x["mask"].bool()
            assert (got[real] - x["logits"][real]).abs().max() <= 1e-5, kind
    """
    import subprocess
    import sys
    import textwrap

    environment = {
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "PATH": "/usr/bin:/bin",
        "PYTHONNOUSERSITE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_PEFT + textwrap.dedent(script)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_square_conv1d_projections_of_gpt2_merge_in_their_own_layout(tmp_path):
    """GPT-2's `Conv1D` keeps its weight (in, out): the update of a square projection (`attn.c_proj`) is transposed
    by the layer's class, which its shape cannot tell."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

    config = AutoConfig.for_model(
        "gpt2", n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=64, pad_token_id=0
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "gpt2")
    torch.manual_seed(0)
    model = adapted(
        DWAttForTokenClassification.from_backbone(str(tmp_path / "gpt2"), num_labels=3), targets=["c_attn", "c_proj"]
    )
    square = model.dwatt.backbone.h[0].attn.c_proj
    assert square.base_layer.weight.shape == (32, 32) and type(square.base_layer).__name__ == "Conv1D"
    ids = torch.randint(3, 99, (2, 6))
    with torch.no_grad():
        trained = model(input_ids=ids).logits
    model.save_pretrained(tmp_path / "head", heads_only=True)
    model.save_pretrained(tmp_path / "full")
    for kind in ("head", "full"):
        reloaded = AutoModelForTokenClassification.from_pretrained(tmp_path / kind, trust_remote_code=True).eval()
        with torch.no_grad():
            torch.testing.assert_close(reloaded(input_ids=ids).logits, trained, atol=1e-5, rtol=0, msg=kind)


def test_lora_refusals_name_the_reason(backbone, tmp_path):
    from dwatt.serving.shared_heads import SharedBackboneHeads

    torch.manual_seed(0)
    model = adapted(DWAttForTokenClassification.from_backbone(str(backbone), num_labels=3))
    model.save_pretrained(tmp_path / "lora", heads_only=True)
    DWAttForTokenClassification.from_backbone(str(backbone), num_labels=3).save_pretrained(
        tmp_path / "fe", heads_only=True
    )
    with pytest.raises(
        ValueError, match=r"'.*lora' adapts its backbone with LoRA \(rank 4 on query, value\).*serve it alone"
    ):
        SharedBackboneHeads.from_pretrained([str(tmp_path / "fe"), str(tmp_path / "lora")])
    loaded = DWAttForTokenClassification.from_pretrained(tmp_path / "lora").eval()
    ids, mask = inputs()
    with torch.no_grad():
        expected = loaded(input_ids=ids, attention_mask=mask).logits
    # A loaded head-only checkpoint saves again either way, and neither is merged twice.
    loaded.save_pretrained(tmp_path / "again", heads_only=True)
    loaded.save_pretrained(tmp_path / "whole")
    merged = DWAttForTokenClassification.from_pretrained(tmp_path / "whole").eval()
    for folder, model_again in (
        ("again", DWAttForTokenClassification.from_pretrained(tmp_path / "again").eval()),
        ("whole", merged),
    ):
        with torch.no_grad():
            torch.testing.assert_close(
                model_again(input_ids=ids, attention_mask=mask).logits, expected, atol=1e-6, rtol=0, msg=folder
            )
    with pytest.raises(ValueError, match="LoRA updates are merged into its backbone: save it whole"):
        merged.save_pretrained(tmp_path / "head-of-whole", heads_only=True)
    with pytest.raises(ValueError, match="--lora-targets: no layer of the backbone is named nowhere"):
        add_lora(DWAttForTokenClassification.from_backbone(str(backbone), num_labels=3), targets=["query", "nowhere"])
    with pytest.raises(ValueError, match=r"`lora\['rank'\]` must be an integer >= 1"):
        from dwatt import DWAttConfig

        DWAttConfig(
            encoder_config=model.config.encoder_config,
            lora={"rank": 0, "alpha": 1, "targets": ["query"], "dropout": 0},
        )


def test_lora_mode_trains_only_the_adapters_fusion_and_head_and_keeps_the_backbone_weights(backbone):
    torch.manual_seed(0)
    model = DWAttForTokenClassification.from_backbone(str(backbone), num_labels=3)
    before = {k: v.clone() for k, v in model.dwatt.backbone.state_dict().items()}
    add_lora(model, rank=2)
    FreezeBackboneCallback("lora").apply(model)
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert all(".lora_" in name for name in trainable if name.startswith("dwatt.backbone."))
    assert any(name.startswith("dwatt.fusion.") for name in trainable)
    model.train()
    assert model.dwatt.backbone.training  # the adapters' dropout is on in training (FE keeps the backbone in eval)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids, mask = inputs()
    model(input_ids=ids, attention_mask=mask, labels=torch.zeros_like(ids)).loss.backward()
    optimizer.step()
    after = model.dwatt.backbone.state_dict()
    for key, value in before.items():
        assert torch.equal(
            after[
                key.replace("query.weight", "query.base_layer.weight")
                .replace("value.weight", "value.base_layer.weight")
                .replace("query.bias", "query.base_layer.bias")
                .replace("value.bias", "value.base_layer.bias")
            ],
            value,
        ), key
    assert default_targets(model) == ["query", "value"]


def test_cli_train_in_lora_mode_then_evaluate_predict_and_push(
    tiny_backbone, tiny_conll, tmp_path, capsys, monkeypatch
):
    from .helpers import RecordingApi

    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--backbone",
                str(tiny_backbone),
                "--data-dir",
                str(tiny_conll),
                "--mode",
                "lora",
                "--n-shot",
                "2",
                "--epochs",
                "2",
                "--batch-size",
                "4",
                "--lr",
                "1e-2",
                "--lora-rank",
                "4",
                "--output-dir",
                str(out),
                "--test",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "no feature cache" in captured.err
    results = json.loads((out / "results.json").read_text())
    assert (
        results["config"]["mode"] == "lora"
        and results["lora"]["rank"] == 4
        and results["lora"]["targets"] == ["query", "value"]
    )
    assert results["cached_features"] is False
    assert main(["evaluate", str(out / "model"), "--data-dir", str(tiny_conll), "--split", "test"]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(results["test_scores"]["f1"], abs=1e-6)
    assert main(["predict", str(out / "model"), "peter blackburn"]) == 0
    assert capsys.readouterr().out.split()[0::2] == ["peter", "blackburn"]
    recorder = RecordingApi()
    monkeypatch.setattr("dwatt.hub.HfApi", lambda *a, **k: recorder)
    assert main(["push", str(out), "someone/lora-head", "--backbone-id", "someone/tiny-bert"]) == 0
    files = recorder.calls[-1][2]["files"]
    card = files["README.md"].decode()
    assert (
        "LoRA (low-rank adapters of rank 4, alpha 8, on the backbone's `query`, `value` layers" in card
        and "- lora" in card
    )
    AutoTokenizer.from_pretrained(tiny_backbone)  # (the tokenizer needs nothing of this)


@pytest.mark.slow
def test_a_data_parallel_lora_run_keeps_every_process_in_step(tiny_backbone, tiny_conll, tmp_path):
    """Two processes train one LoRA run (the backbone in train mode, its dropout on, as in FT): the same adapters,
    fusion and head on both, one writer, and a small head-only checkpoint holding the adapters."""
    from .helpers import config_for, launch

    ranks = launch(
        config_for(tiny_backbone, tiny_conll, tmp_path / "lora", mode="lora", evaluate_test=False), tmp_path
    )
    adapters = [name for name in ranks[0]["weights"] if ".lora_" in name]
    assert adapters and any(ranks[0]["weights"][name].abs().max() > 0 for name in adapters if ".lora_B." in name)
    for name, tensor in ranks[0]["weights"].items():
        assert torch.equal(tensor, ranks[1]["weights"][name]), name
    assert ranks[1]["written"] == [] and ranks[0]["results"]["dev_curve"] == ranks[1]["results"]["dev_curve"]
    saved = load_file(str(tmp_path / "lora" / "model" / "model.safetensors"))
    assert sum(key.startswith("dwatt.lora.updates.") for key in saved) == len(adapters)
    assert not any(key.startswith("dwatt.backbone.") for key in saved)


@pytest.mark.parametrize("heads_only", [True, False])
def test_a_lora_checkpoint_s_adapter_loads_with_peft_on_the_plain_backbone(backbone, tmp_path, heads_only):
    """dwatt's checkpoint of a LoRA run keeps its adapters in PEFT's own format (`adapter/`): PEFT loads them on the
    plain backbone, which then gives the hidden states the model's head reads, as the trained model gives them, and
    the checkpoint itself still loads as dwatt's (the adapter folder is beside it, not taken for a PEFT checkpoint)."""
    from peft import PeftModel
    from transformers import AutoModel, AutoTokenizer

    from dwatt.lora import ADAPTER_FOLDER
    from dwatt.training.run_results import save_checkpoint

    torch.manual_seed(0)
    model = adapted(DWAttForTokenClassification.from_backbone(str(backbone), fusion="dwatt", num_labels=3))
    ids, mask = inputs()
    with torch.no_grad():
        trained_states = model.dwatt.backbone(input_ids=ids, attention_mask=mask).last_hidden_state
        trained_logits = model(input_ids=ids, attention_mask=mask).logits
    save_checkpoint(model, AutoTokenizer.from_pretrained(backbone), tmp_path / "model", heads_only=heads_only)
    adapter = tmp_path / "model" / ADAPTER_FOLDER
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (
        config["peft_type"] == "LORA" and config["r"] == 4 and sorted(config["target_modules"]) == ["query", "value"]
    )
    assert config["base_model_name_or_path"] == backbone.name  # no folder of this machine
    plain = PeftModel.from_pretrained(AutoModel.from_pretrained(backbone), adapter).eval()
    with torch.no_grad():
        states = plain(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(states, trained_states, rtol=0, atol=1e-6)
    reloaded = DWAttForTokenClassification.from_pretrained(tmp_path / "model").eval()
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=ids, attention_mask=mask).logits, trained_logits, rtol=1e-5, atol=1e-5
        )
    if heads_only:  # loaded head-only, its updates merged and kept beside it: saved again (a push), the same adapter
        from dwatt.lora import save_adapter

        assert save_adapter(reloaded, tmp_path / "again", "someone/tiny-bert")
        again = PeftModel.from_pretrained(AutoModel.from_pretrained(backbone), tmp_path / "again").eval()
        with torch.no_grad():
            states = again(input_ids=ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(states, trained_states, rtol=0, atol=1e-5)
        assert json.loads((tmp_path / "again" / "adapter_config.json").read_text())["base_model_name_or_path"] == (
            "someone/tiny-bert"
        )


def test_a_model_without_adapters_saves_no_peft_adapter(backbone, tmp_path):
    from dwatt.lora import save_adapter

    model = DWAttForTokenClassification.from_backbone(str(backbone), num_labels=3)
    assert save_adapter(model, tmp_path / "adapter", "x") is False and not (tmp_path / "adapter").exists()
