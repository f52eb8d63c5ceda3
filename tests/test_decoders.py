"""Decoder LLMs as frozen backbones (their tokenizers: test_tokenization): `last` pooling, chosen
layers, the feature cache's size and where it lives, Base+n continuing the backbone's attention pattern, and what
holds for encoders (CLI runs, shared heads, pipelines without dwatt, data parallelism) on a tiny Llama."""

import json

import pytest
import torch
from datasets import Dataset
from transformers import AutoConfig, AutoModelForCausalLM

from configuration_dwatt import FUSIONS, parse_fused_layers
from dwatt import DWAttConfig, DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.cli import main
from dwatt.data import load_tokenizer
from dwatt.features.build import build_feature_cache
from dwatt.features.cache import FeatureCollator
from dwatt.training import RunConfig, run

from .conftest import DECODER_CORPUS, run_without_dwatt


def test_ner_on_a_decoder_trains_cached_then_predicts_and_evaluates_the_same_way(
    tiny_decoder, tiny_conll, tmp_path, capsys
):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--backbone",
                str(tiny_decoder),
                "--data-dir",
                str(tiny_conll),
                "--n-shot",
                "2",
                "--epochs",
                "2",
                "--batch-size",
                "4",
                "--lr",
                "5e-3",
                "--cache-dtype",
                "float32",
                "--output-dir",
                str(out),
            ]
        )
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    assert results["cached_features"] and results["cache_storage"] == "memory" and results["cache_bytes"] > 0
    assert "feature cache: " in capsys.readouterr().err
    assert main(["evaluate", str(out / "model"), "--data-dir", str(tiny_conll)]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(results["best_dev_f1"], abs=1e-6)
    assert main(["predict", str(out / "model"), "Peter Blackburn visited Brussels ."]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.split()[::2]] == [
        "Peter",
        "Blackburn",
        "visited",
        "Brussels",
        ".",
    ]


@pytest.mark.parametrize("fusion", [f for f in FUSIONS if f != "base_plus_n"])
def test_last_pooling_reads_the_last_token_on_either_padding_side_and_its_cache_is_exact(fusion, tiny_decoder):
    from dwatt.training.cls import cache_pooling

    torch.manual_seed(0)
    model = DWAttForSequenceClassification.from_backbone(str(tiny_decoder), fusion=fusion, num_labels=3).eval()
    model.freeze_backbone()
    assert model.config.pooling == "last" and cache_pooling(fusion, "last") == "last"
    tokenizer = load_tokenizer(tiny_decoder)
    texts = DECODER_CORPUS[:3]
    with torch.no_grad():
        alone = torch.cat([model(**tokenizer(text, return_tensors="pt")).logits for text in texts])
        for side in ("left", "right"):
            tokenizer.padding_side = side
            batch = tokenizer(texts, padding=True, return_tensors="pt")
            torch.testing.assert_close(model(**batch).logits, alone, atol=1e-5, rtol=0, msg=side)
        rows = Dataset.from_dict(dict(tokenizer(texts)) | {"labels": [0, 1, 2]})
        cache = build_feature_cache(model, rows, dtype=torch.float32, progress=False, pooled="last")
        assert cache.features.shape[0] == 3  # one position per text
        batch = FeatureCollator()([cache[i] for i in range(3)])
        cached = model(backbone_hidden_states=batch["backbone_hidden_states"], attention_mask=batch["attention_mask"])
    torch.testing.assert_close(cached.logits, alone, atol=1e-5, rtol=0)


def test_classification_on_a_decoder_pools_the_last_token_from_a_cache_of_one_position_per_text(
    tiny_decoder, tmp_path
):
    topics = tmp_path / "topics"
    topics.mkdir()
    (topics / "train.csv").write_text(
        "text,label\nPeter Blackburn,people\nBrussels,places\nPeter called,people\nBritish lamb,places\n"
    )
    (topics / "dev.csv").write_text("text,label\nEU rejects German call,places\nPeter visited,people\n")
    results = run(
        RunConfig(
            backbone=str(tiny_decoder),
            task="cls",
            data_dir=str(topics),
            n_shot=2,
            epochs=2,
            output_dir=str(tmp_path / "cls"),
            progress=False,
        )
    )
    assert results["pooling"] == "last" and results["cached_features"] == "last"
    mean = run(
        RunConfig(
            backbone=str(tiny_decoder),
            task="cls",
            data_dir=str(topics),
            n_shot=2,
            epochs=2,
            pooling="mean",
            fusion="concat",
            output_dir=str(tmp_path / "mean"),
            progress=False,
            save_model=False,
        )
    )
    assert mean["pooling"] == "mean" and mean["cached_features"] == "mean"


def test_layers_read_through_the_final_norm_are_the_norm_of_each_layer_where_the_backbone_has_one(
    tiny_decoder, tiny_backbone
):
    """`through_final_norm`: each hidden state the model reads is the backbone's final norm of it, cut or not (the
    uncut backbone's last one is normed once, as it returns it); a backbone with no final norm refuses it."""
    from transformers import AutoModel

    plain = AutoModel.from_pretrained(tiny_decoder).eval()
    ids = torch.tensor([[5, 9, 13, 2, 7]])
    with torch.no_grad():
        states = plain(input_ids=ids, output_hidden_states=True).hidden_states
        for layer in ("1", "3"):
            model = DWAttForTokenClassification.from_backbone(
                str(tiny_decoder), fusion="base", num_labels=3, fused_layers=layer, through_final_norm=True
            ).eval()
            read = model.dwatt.run_backbone(input_ids=ids, attention_mask=torch.ones_like(ids))
            torch.testing.assert_close(read[int(layer)], plain.norm(states[int(layer)]) if layer == "1" else states[3])
            torch.testing.assert_close(read[0], plain.norm(states[0]))
    with pytest.raises(ValueError, match="the 'bert' backbone applies no norm after its last layer"):
        DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="base", through_final_norm=True)
    with pytest.raises(ValueError, match="`through_final_norm` must be True or False"):
        DWAttConfig(fusion="base", through_final_norm="yes")


def test_fused_layers_specs():
    assert parse_fused_layers("all", 6) == [1, 2, 3, 4, 5, 6]
    assert parse_fused_layers("every:4", 30) == [4, 8, 12, 16, 20, 24, 28, 30]  # the last layer always
    assert parse_fused_layers("12-23", 30) == [*range(12, 24), 30]
    assert parse_fused_layers("3,7,12", 12) == parse_fused_layers([3, 7, 12], 12) == [3, 7, 12]
    # a probe's layers may name the embedding output, 0; "all" is the backbone's layers still
    assert parse_fused_layers("0-2", 6, add_last=False, lowest=0) == [0, 1, 2]
    assert parse_fused_layers("all", 6, lowest=0) == [1, 2, 3, 4, 5, 6]
    for bad, message in (
        ("every:0", "needs an integer k >= 1"),
        ("5-2", "a range is 'a-b'"),
        ("0,3", r"names layers \[0\]"),
        ("some", "expected 'all', 'every:k'"),
        ("31", r"names layers \[31\]; the backbone's are 1..30"),
    ):
        with pytest.raises(ValueError, match=f"`fused_layers` '{bad}'.*{message}"):
            parse_fused_layers(bad, 30)


def test_chosen_layers_are_the_only_ones_fused_cached_and_recorded(tiny_decoder, tiny_conll, tmp_path):
    results = run(
        RunConfig(
            backbone=str(tiny_decoder),
            data_dir=str(tiny_conll),
            n_shot=2,
            epochs=1,
            layers="2",
            cache_dtype="float32",
            output_dir=str(tmp_path / "run"),
            progress=False,
        )
    )
    model = DWAttForTokenClassification.from_pretrained(tmp_path / "run" / "model")
    assert model.config.fused_layers == "2" and model.dwatt.fused_layer_indices == [2, 3]
    assert model.dwatt.fusion.layer_positions.shape[0] == 2  # DWAtt's keys and values: two layers, not three
    full = run(
        RunConfig(
            backbone=str(tiny_decoder),
            data_dir=str(tiny_conll),
            n_shot=2,
            epochs=1,
            cache_dtype="float32",
            output_dir=str(tmp_path / "all"),
            progress=False,
            save_model=False,
        )
    )
    assert results["cache_bytes"] * 3 == full["cache_bytes"] * 2  # the cache holds two of the three layers
    with pytest.raises(ValueError, match="`fused_layers` '9' names layers"):
        DWAttConfig(encoder_config=model.config.encoder_config, fused_layers="9")
    # Base reads one layer (the last by default), Base+n builds on the last: other choices are refused, not ignored.
    with pytest.raises(ValueError, match="`fused_layers` '1,3' names several layers, but the 'base' head reads one"):
        DWAttConfig(encoder_config=model.config.encoder_config, fusion="base", fused_layers="1,3")
    assert DWAttConfig(encoder_config=model.config.encoder_config, fusion="base", fused_layers="2").read_layer == 2
    with pytest.raises(
        ValueError, match="`fused_layers` '2' chooses layers, but the 'base_plus_n' fusion builds on the last"
    ):
        DWAttConfig(encoder_config=model.config.encoder_config, fusion="base_plus_n", fused_layers="2")
    for fusion in ("base", "base_plus_n"):
        assert (
            DWAttConfig(encoder_config=model.config.encoder_config, fusion=fusion, fused_layers="1-3").fusion == fusion
        )


def test_a_cache_too_large_for_memory_is_memory_mapped_from_disk_with_the_same_results(
    tiny_decoder, tiny_conll, tmp_path, monkeypatch, capsys
):
    import collections

    import psutil

    config = dict(
        backbone=str(tiny_decoder),
        data_dir=str(tiny_conll),
        n_shot=2,
        epochs=2,
        cache_dtype="float32",
        save_model=False,
        progress=True,
    )
    in_memory = run(RunConfig(**config, output_dir=str(tmp_path / "memory")))
    from dwatt.training import FEATURE_MEMO

    FEATURE_MEMO.clear()
    Memory = collections.namedtuple("Memory", "available")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory(available=1000))
    on_disk = run(RunConfig(**config, output_dir=str(tmp_path / "disk")))
    err = capsys.readouterr().err
    assert "memory-mapped from files under" in err and str(tmp_path / ".feature-cache") in err
    assert on_disk["cache_storage"] == "disk" and in_memory["cache_storage"] == "memory"
    assert on_disk["dev_curve"] == in_memory["dev_curve"]
    kept = sorted(path.name for path in (tmp_path / ".feature-cache").iterdir())
    assert len(kept) == 4 and {name.split(".", 1)[1] for name in kept} == {
        "bin",
        "bin.json",
    }  # training and dev caches
    FEATURE_MEMO.clear()
    again = run(RunConfig(**config, output_dir=str(tmp_path / "disk-again")))  # a later run reads them, by their key
    assert (
        again["dev_curve"] == in_memory["dev_curve"]
        and sorted(p.name for p in (tmp_path / ".feature-cache").iterdir()) == kept
    )
    FEATURE_MEMO.clear()
    import shutil

    monkeypatch.setattr(
        shutil, "disk_usage", lambda path: collections.namedtuple("Usage", "total used free")(1, 1, 1000)
    )
    code = main(
        [
            "train",
            "--backbone",
            str(tiny_decoder),
            "--data-dir",
            str(tiny_conll),
            "--n-shot",
            "2",
            "--epochs",
            "1",
            "--output-dir",
            str(tmp_path / "neither"),
            "--quiet",
        ]
    )
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and message.startswith("dwatt train: error: the feature cache needs ")
    assert "--layers every:4" in message and "--no-cache" in message
    FEATURE_MEMO.clear()


def test_base_plus_n_continues_a_local_global_alternation_by_layer_index(tmp_path):
    config = AutoConfig.for_model(
        "gemma3_text",
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=48,
        vocab_size=99,
        max_position_embeddings=64,
        sliding_window=2,
        sliding_window_pattern=2,
        pad_token_id=0,
    )
    assert config.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "gemma")
    model = DWAttForTokenClassification.from_backbone(
        str(tmp_path / "gemma"), fusion="base_plus_n", num_labels=3, num_extra_layers=3
    ).eval()
    extra = model.dwatt.fusion.layer
    assert [layer.self_attn.is_sliding for layer in extra] == [
        False,
        True,
        False,
    ]  # positions 3, 4, 5: full, sliding, full
    ids = torch.randint(3, 99, (2, 6))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0  # padding: both kinds of mask are tensors (without it, the full one is left to `is_causal`)
    hidden = model.dwatt.run_backbone(input_ids=ids, attention_mask=mask)[-1]
    inputs = model.dwatt.backbone_runner.layer_inputs(extra, hidden, mask)  # a dry run, as from cached states
    # Each extra layer gets the mask and rotary embeddings the backbone hands its last layer of the same kind.
    full, sliding = (inputs[0][1]["attention_mask"], inputs[1][1]["attention_mask"])
    assert torch.equal(inputs[2][1]["attention_mask"], full) and not torch.equal(full, sliding)
    assert not torch.equal(inputs[0][1]["position_embeddings"][0], inputs[1][1]["position_embeddings"][0])  # per type


def test_shared_heads_on_a_decoder_equal_each_head_alone(tiny_decoder, tmp_path):
    from dwatt.serving.shared_heads import SharedBackboneHeads

    folders = {}
    for seed, (cls, fusion) in enumerate(
        ((DWAttForTokenClassification, "dwatt"), (DWAttForSequenceClassification, "concat"))
    ):
        torch.manual_seed(seed)
        cls.from_backbone(str(tiny_decoder), fusion=fusion, num_labels=3).save_pretrained(
            tmp_path / fusion, heads_only=True
        )
        folders[fusion] = tmp_path / fusion
    shared = SharedBackboneHeads.from_pretrained({name: str(path) for name, path in folders.items()})
    tokenizer = load_tokenizer(tiny_decoder)
    tokenizer.padding_side = "left"
    batch = tokenizer(DECODER_CORPUS[:3], padding=True, return_tensors="pt")
    with torch.no_grad():
        together = shared(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        for name, cls in (("dwatt", DWAttForTokenClassification), ("concat", DWAttForSequenceClassification)):
            alone = cls.from_pretrained(folders[name]).eval()(**batch).logits
            torch.testing.assert_close(together[name].logits, alone, atol=1e-5, rtol=0)


def test_pipelines_serve_decoder_checkpoints_where_dwatt_is_not_installed(tiny_decoder, tmp_path):
    tokenizer = load_tokenizer(tiny_decoder)
    expected = {}
    for task, cls in (
        ("token-classification", DWAttForTokenClassification),
        ("text-classification", DWAttForSequenceClassification),
    ):
        torch.manual_seed(0)
        model = cls.from_backbone(str(tiny_decoder), num_labels=3).eval()
        model.save_pretrained(tmp_path / task, heads_only=True)
        tokenizer.save_pretrained(tmp_path / task)
        with torch.no_grad():
            logits = model(**tokenizer(DECODER_CORPUS[1], return_tensors="pt")).logits
        expected[task] = logits.softmax(-1).max().item() if task == "text-classification" else logits.shape[1]
    script = f"""
        import json
        from transformers import pipeline
        tags = pipeline("token-classification", model={str(tmp_path / "token-classification")!r}, trust_remote_code=True)
        topics = pipeline("text-classification", model={str(tmp_path / "text-classification")!r}, trust_remote_code=True)
        text = {DECODER_CORPUS[1]!r}
        out = {{"tags": tags(text, aggregation_strategy="none"), "top": topics(text)[0]["score"],
               "batch": [r["score"] for r in topics([text, "EU", text], batch_size=3)]}}
        open("out.json", "w").write(json.dumps(out, default=float))
    """
    run_without_dwatt(script, tmp_path)
    out = json.loads((tmp_path / "out.json").read_text())
    assert len(out["tags"]) == expected["token-classification"]  # a tag per token of the running text
    assert out["top"] == pytest.approx(expected["text-classification"], abs=1e-5)
    assert out["batch"][0] == pytest.approx(out["top"], abs=1e-5) == pytest.approx(out["batch"][2], abs=1e-5)  # padded


@pytest.mark.slow
def test_a_data_parallel_run_on_a_decoder_equals_one_process(tiny_decoder, tiny_conll, tmp_path):
    from safetensors.torch import load_file

    from .helpers import config_for, launch

    alone = run(config_for(tiny_decoder, tiny_conll, tmp_path / "alone", evaluate_test=False))
    weights = load_file(str(tmp_path / "alone" / "model" / "model.safetensors"))
    ranks = launch(config_for(tiny_decoder, tiny_conll, tmp_path / "together", evaluate_test=False), tmp_path)
    for name, tensor in ranks[0]["weights"].items():
        assert torch.equal(tensor, ranks[1]["weights"][name]), name
        assert torch.allclose(tensor, weights[name], atol=1e-5, rtol=0), name
    assert ranks[0]["results"]["best_dev_f1"] == pytest.approx(alone["best_dev_f1"], abs=1e-5)


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_a_backbone_saved_in_bf16_trains_probes_predicts_and_exports(
    kind, tiny_backbone, tiny_decoder, tiny_conll, tmp_path, capsys
):
    """Most LLM checkpoints are saved in bf16 and transformers 5 loads them so: the fusion and head train in fp32 on
    features cast to it, with the feature cache and without, in a probe's stacked heads too; the export is fp32."""
    import shutil

    from transformers import AutoModel

    source = tiny_backbone if kind == "encoder" else tiny_decoder
    backbone = tmp_path / "bf16"
    shutil.copytree(source, backbone)
    AutoModel.from_pretrained(source).to(torch.bfloat16).save_pretrained(backbone)
    assert json.loads((backbone / "config.json").read_text())["dtype"] == "bfloat16"
    common = ["--backbone", str(backbone), "--data-dir", str(tiny_conll), "--n-shot", "1", "--epochs", "1", "--quiet"]
    for fusion, cached in (("dwatt", []), ("base", ["--layers", "2"]), ("scalar_mix", ["--no-cache"])):
        assert main(["train", *common, "--fusion", fusion, *cached, "--output-dir", str(tmp_path / fusion)]) == 0, (
            fusion
        )
    assert main(["probe", *common, "--learning-rates", "1e-2", "--results", str(tmp_path / "probe" / "r.jsonl")]) == 0
    assert main(["predict", str(tmp_path / "dwatt" / "model"), "eu rejects german call"]) == 0
    assert main(["export", str(tmp_path / "dwatt" / "model"), str(tmp_path / "onnx")]) == 0
    capsys.readouterr()
    for folder in (tmp_path / "dwatt" / "model", tmp_path / "onnx"):
        assert main(["predict", str(folder), "eu rejects german call"]) == 0
    printed = capsys.readouterr().out.split("\n\n")
    assert printed[0].strip() == printed[1].strip()
