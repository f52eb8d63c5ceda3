"""What DWAtt attends to (dwatt.layer_weights): a run's dev layer weights per gold entity type are distributions over
the fused layers, counted over the labelled positions; a fusion without weights is refused and records none."""

import pytest
from transformers import DataCollatorForTokenClassification

from dwatt import RobertaDWAttForTokenClassification
from dwatt.data import CONLL_LABELS, load_conll2003, load_tokenizer, tokenize_and_align
from dwatt.layer_weights import layer_weights_by_type
from dwatt.training import run_ner

from .helpers import tiny_ner_run_config


def test_layer_weights_per_entity_type_are_distributions_over_the_fused_layers(tiny_backbone, tiny_conll, tmp_path):
    results = run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "run", save_model=False))
    weights = results["dev_layer_weights"]
    assert weights["layers"] == [1, 2, 3] and set(weights["by_type"]) == {"O", "PER", "ORG", "LOC", "MISC"} & set(
        weights["by_type"]
    )
    for row in weights["by_type"].values():
        assert len(row) == 3 and sum(row) == pytest.approx(1, abs=1e-5)
    data = load_conll2003(tiny_conll)
    tokenizer = load_tokenizer(tiny_backbone)
    dev = tokenize_and_align(data["validation"], tokenizer)
    gold = [CONLL_LABELS[label] for row in dev["labels"] for label in row if label != -100]
    expected = {t: sum(g == t or g[2:] == t for g in gold) for t in weights["positions"]}
    assert weights["positions"] == expected and sum(expected.values()) == len(gold)
    base = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="base", num_labels=9)
    with pytest.raises(ValueError, match="fusion 'base' has no layer weights"):
        layer_weights_by_type(
            base,
            dev.select_columns(["input_ids", "attention_mask", "labels"]),
            DataCollatorForTokenClassification(tokenizer),
            list(CONLL_LABELS),
        )
    assert "dev_layer_weights" not in run_ner(
        tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "b", fusion="base", save_model=False)
    )
