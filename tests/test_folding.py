"""dwatt.folding: a Concat token classifier on cached features is evaluated as its one linear map, asked of the model
(`token_linear_map`), with a copy's own weights where given; other heads are not folded."""

import torch
from torch.func import functional_call

from dwatt.folding import LAYERS_INPUT, FoldedConcat, linear_token_classifier
from modeling_dwatt import DWAttForSequenceClassification, DWAttForTokenClassification

from .conftest import tiny_config


def cached_batch(model, batch: int = 2, seq: int = 6) -> dict:
    ids = torch.randint(1, 50, (batch, seq))
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    with torch.no_grad():
        hidden = model.dwatt.run_backbone(input_ids=ids, attention_mask=mask)
    return {LAYERS_INPUT: torch.stack(hidden, 1), "attention_mask": mask}


def test_a_concat_tagger_is_folded_into_the_map_the_model_offers():
    model = DWAttForTokenClassification(tiny_config("bert", "concat")).eval()
    batch = cached_batch(model)
    assert FoldedConcat.fits(model, batch) and not FoldedConcat.fits(model, {"input_ids": None})
    weight, bias = FoldedConcat.fold(model)
    expected_weight, expected_bias = model.token_linear_map()
    assert torch.equal(weight, expected_weight) and torch.equal(bias, expected_bias)
    with torch.no_grad():
        logits = model(**batch).logits
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(
        FoldedConcat.logits(model, batch, (weight, bias))[real], logits[real], atol=1e-5, rtol=0
    )


def test_a_copy_s_weights_fold_in_place_of_the_model_s_own():
    model = DWAttForTokenClassification(tiny_config("bert", "concat")).eval()
    copy = {name: torch.randn_like(p) for name, p in model.head_parameters().items()}
    batch = cached_batch(model)
    folded = FoldedConcat.fold(model, copy)
    with torch.no_grad():
        logits = functional_call(model, copy, (), batch).logits
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(FoldedConcat.logits(model, batch, folded)[real], logits[real], atol=1e-4, rtol=0)
    assert not torch.equal(folded[0], FoldedConcat.fold(model)[0])  # the model's own weights are untouched


def test_only_a_linear_fusion_under_the_linear_token_head_folds():
    batch = cached_batch(DWAttForTokenClassification(tiny_config("bert", "dwatt")))
    assert not FoldedConcat.fits(DWAttForTokenClassification(tiny_config("bert", "dwatt")), batch)
    assert not FoldedConcat.fits(DWAttForSequenceClassification(tiny_config("bert", "concat")), batch)

    class OwnHead(DWAttForTokenClassification):
        def head(self, fused, positions):
            return super().head(fused.relu(), positions)

    assert not linear_token_classifier(OwnHead(tiny_config("bert", "concat")))
    assert linear_token_classifier(DWAttForTokenClassification(tiny_config("bert", "concat")))
