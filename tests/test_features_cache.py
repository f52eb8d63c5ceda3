"""The feature cache as a dataset (dwatt.features.cache): cached layers give exactly the uncached logits (fp32) through
its collator, memory-mapped equals in memory, and a dev cache of the scored positions only scores the same."""

import pytest
import torch
from transformers import BertTokenizerFast, DataCollatorForTokenClassification

from dwatt import RobertaDWAttForTokenClassification
from dwatt.data import load_conll2003, tokenize_and_align
from dwatt.features.build import build_feature_cache
from dwatt.features.cache import FeatureCollator


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
        cached = model(
            backbone_hidden_states=cached_batch["backbone_hidden_states"],
            attention_mask=cached_batch["attention_mask"],
        ).logits
        direct = model(**{k: v for k, v in direct_batch.items() if k != "labels"}).logits
    real = direct_batch["attention_mask"].bool()  # padded positions hold zeros in the cache, by design
    assert torch.equal(cached[real], direct[real])
    assert cache[0]["backbone_hidden_states"].shape[0] == len(model.dwatt.fused_layer_indices)


def test_memory_mapped_cache_equals_the_in_memory_one(tiny_backbone, tiny_conll, tmp_path):
    tokens = tokenize_and_align(
        load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone)
    )
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9)
    in_memory = build_feature_cache(model, tokens, progress=False)
    mapped = build_feature_cache(model, tokens, path=tmp_path / "features.bin", progress=False)
    assert (tmp_path / "features.bin").stat().st_size == in_memory.nbytes
    assert torch.equal(in_memory.features, mapped.features) and in_memory.features.dtype == torch.float16


def test_dev_cache_of_scored_positions_gives_the_same_scores(tiny_backbone, tiny_conll):
    tokens = tokenize_and_align(
        load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone)
    )
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9).eval()
    full = build_feature_cache(model, tokens, dtype=torch.float32, progress=False)
    scored = build_feature_cache(model, tokens, dtype=torch.float32, progress=False, scored_positions_only=True)
    assert (
        scored.features.shape[0]
        == sum(label != -100 for row in tokens["labels"] for label in row)
        < full.features.shape[0]
    )
    for index in range(len(tokens)):
        whole, compact = full[index], scored[index]
        keep = whole["labels"] != -100
        assert torch.equal(compact["labels"], whole["labels"][keep])
        with torch.no_grad():
            a = model(backbone_hidden_states=whole["backbone_hidden_states"][None]).logits[0][keep]
            b = model(backbone_hidden_states=compact["backbone_hidden_states"][None]).logits[0]
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    base_plus = RobertaDWAttForTokenClassification.from_backbone(
        str(tiny_backbone), fusion="base_plus_n", num_labels=9
    )
    with pytest.raises(ValueError, match="needs a per-token fusion; 'base_plus_n' mixes positions"):
        build_feature_cache(base_plus, tokens, scored_positions_only=True)
