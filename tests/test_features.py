"""The feature cache (dwatt.features): cached layers give exactly the uncached logits (fp32), memory-mapped equals in
memory, a dev cache of the scored positions only scores the same, and runs of one process share the backbone's
features, a run of fewer layers taking them from a remembered cache of more."""

import pytest
import torch
from transformers import BertTokenizerFast, DataCollatorForTokenClassification

from dwatt import RobertaDWAttForTokenClassification
from dwatt.data import load_conll2003, tokenize_and_align
from dwatt.features import FeatureCollator, build_feature_cache
from dwatt.training import run_ner

from .helpers import tiny_ner_run_config


@pytest.mark.parametrize("fusion", ["dwatt", "base_plus_n", "scalar_mix"])
def test_cached_features_give_exactly_the_uncached_logits_in_fp32(tiny_backbone, tiny_conll, fusion):
    data = load_conll2003(tiny_conll)["validation"]
    tokenizer = BertTokenizerFast.from_pretrained(tiny_backbone)
    tokens = tokenize_and_align(data, tokenizer)
    order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]["input_ids"]))
    tokens = tokens.select(order).select_columns(["input_ids", "token_type_ids", "attention_mask", "labels"])
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion=fusion, num_labels=9).eval()
    cache = build_feature_cache(model, tokens, batch_size=len(tokens), dtype=torch.float32, progress=False)
    cached_batch = FeatureCollator()([cache[i] for i in range(len(cache))])
    direct_batch = DataCollatorForTokenClassification(tokenizer)([tokens[i] for i in range(len(tokens))])
    assert torch.equal(cached_batch["labels"], direct_batch["labels"])
    with torch.no_grad():
        cached = model(backbone_hidden_states=cached_batch["backbone_hidden_states"], attention_mask=cached_batch["attention_mask"]).logits
        direct = model(**{k: v for k, v in direct_batch.items() if k != "labels"}).logits
    real = direct_batch["attention_mask"].bool()  # padded positions hold zeros in the cache, by design
    assert torch.equal(cached[real], direct[real])
    assert cache[0]["backbone_hidden_states"].shape[0] == len(model.dwatt.fused_layer_indices)


def test_memory_mapped_cache_equals_the_in_memory_one(tiny_backbone, tiny_conll, tmp_path):
    tokens = tokenize_and_align(load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone))
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9)
    in_memory = build_feature_cache(model, tokens, progress=False)
    mapped = build_feature_cache(model, tokens, path=tmp_path / "features.bin", progress=False)
    assert (tmp_path / "features.bin").stat().st_size == in_memory.nbytes
    assert torch.equal(in_memory.features, mapped.features) and in_memory.features.dtype == torch.float16


def test_dev_cache_of_scored_positions_gives_the_same_scores(tiny_backbone, tiny_conll):
    tokens = tokenize_and_align(load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone))
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9).eval()
    full = build_feature_cache(model, tokens, dtype=torch.float32, progress=False)
    scored = build_feature_cache(model, tokens, dtype=torch.float32, progress=False, scored_positions_only=True)
    assert scored.features.shape[0] == sum(label != -100 for row in tokens["labels"] for label in row) < full.features.shape[0]
    for index in range(len(tokens)):
        whole, compact = full[index], scored[index]
        keep = whole["labels"] != -100
        assert torch.equal(compact["labels"], whole["labels"][keep])
        with torch.no_grad():
            a = model(backbone_hidden_states=whole["backbone_hidden_states"][None]).logits[0][keep]
            b = model(backbone_hidden_states=compact["backbone_hidden_states"][None]).logits[0]
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    base_plus = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="base_plus_n", num_labels=9)
    with pytest.raises(ValueError, match="needs a per-token fusion; 'base_plus_n' mixes positions"):
        build_feature_cache(base_plus, tokens, scored_positions_only=True)


def test_runs_of_one_process_share_backbone_features_and_agree_with_fresh_ones(tiny_backbone, tiny_conll, tmp_path):
    from dwatt.training import FEATURE_MEMO

    FEATURE_MEMO.clear()
    first = run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "a", save_model=False, fusion="concat"))
    misses = FEATURE_MEMO.misses
    second = run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "b", save_model=False, fusion="dwatt"))
    assert FEATURE_MEMO.misses == misses and FEATURE_MEMO.hits >= 2  # same layers, sample and dev: no new features
    FEATURE_MEMO.clear()
    fresh = run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "c", save_model=False, fusion="dwatt"))
    assert fresh["dev_curve"] == second["dev_curve"] and first["dev_curve"] != second["dev_curve"]
    run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "d", save_model=False, fusion="dwatt", seed=1))
    assert FEATURE_MEMO.misses == 3  # another trial draws another sample: its training features are new


def test_a_run_reading_fewer_layers_takes_them_from_a_remembered_cache_of_more(tiny_backbone, tiny_conll, tmp_path):
    from dwatt.experiment.grid import grid, widest_first
    from dwatt.training import FEATURE_MEMO

    FEATURE_MEMO.clear()
    run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "all", save_model=False, fusion="dwatt", cache_dtype="float32"))
    misses = FEATURE_MEMO.misses
    derived = run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "base", save_model=False, fusion="base",
                                 cache_dtype="float32"))
    assert FEATURE_MEMO.misses == misses  # z_L of the sample and of the dev split, out of DWAtt's caches
    FEATURE_MEMO.clear()
    fresh = run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "fresh", save_model=False, fusion="base",
                               cache_dtype="float32"))
    assert fresh["dev_curve"] == derived["dev_curve"] and fresh["best_dev_scores"] == derived["best_dev_scores"]
    # A sweep runs each sample's all-layer fusions first, so that Base and Base+n find their layer remembered.
    order = [spec.fusion for spec in widest_first(grid(["base", "base_plus_n", "concat", "dwatt"], n_shots=(2, 4), epochs=(1,), trials=1))]
    assert order == ["concat", "dwatt", "base", "base_plus_n"] * 2
    FEATURE_MEMO.clear()
