"""Copies of a head held stacked (dwatt.head_stack): under vmap and one after another they agree, and a Concat head is
evaluated as its folded linear map."""

import pytest
import torch

from dwatt.training import run_together

from .helpers import engine_config, head_weights


def test_a_concat_head_is_evaluated_as_its_folded_linear_map(tiny_backbone, tiny_conll, tmp_path, monkeypatch):
    """The dev and test passes of Concat heads run `FoldedConcat` (classifier times projection), each copy's map made
    once per pass: on every batch its logits are the model's with that copy's weights, up to float rounding, and the
    runs' dev curves and test scores are those of the model run on each batch."""
    from torch.func import functional_call

    from dwatt.folding import FoldedConcat

    real_fold, real_logits, folds, batches = FoldedConcat.fold, FoldedConcat.logits, {}, []

    def fold(model, parameters=None):
        folded = real_fold(model, parameters)
        folds[id(folded)] = (folded, {name: t.clone() for name, t in (parameters or {}).items()})
        return folded

    def checked(model, batch, folded):
        logits = real_logits(model, batch, folded)
        with torch.no_grad():
            ran = functional_call(model, folds[id(folded)][1], (), batch, tie_weights=False).logits
        torch.testing.assert_close(logits, ran, rtol=1e-5, atol=1e-5)
        batches.append(logits.shape)
        return logits

    def run(where):
        made = [
            engine_config(
                tiny_backbone,
                tiny_conll,
                tmp_path / where / str(rate),
                fusion="concat",
                learning_rate=rate,
                save_model=True,
                evaluate_test=True,
            )
            for rate in (5e-3, 5e-2)
        ]
        return run_together(made, vectorize=True)

    from dwatt import stacked_heads
    from dwatt.training import together

    # two sentences a batch: the tiny dev and test sets (5 sentences) in three batches each
    monkeypatch.setitem(stacked_heads.train_heads.__kwdefaults__, "eval_batch_size", 2)
    monkeypatch.setattr(together.evaluate_features, "__defaults__", (2, None))
    monkeypatch.setattr(FoldedConcat, "fold", staticmethod(fold))
    monkeypatch.setattr(FoldedConcat, "logits", staticmethod(checked))
    folded = run("folded")
    copies, epochs = 2, 3
    assert len(folds) == copies * epochs + copies  # one per copy on each dev pass, and on its test pass
    assert len(batches) == 3 * len(folds)  # each map served its pass's three batches
    monkeypatch.setattr(FoldedConcat, "fits", staticmethod(lambda model, batch: False))
    folds.clear()
    batches.clear()
    model_run = run("model")
    assert not batches and not folds
    for mine, theirs in zip(folded, model_run):
        assert [p["f1"] for p in mine["dev_curve"]] == pytest.approx([p["f1"] for p in theirs["dev_curve"]], abs=1e-12)
        assert mine["test_scores"] == pytest.approx(theirs["test_scores"], abs=1e-12)
    assert folded[0]["dev_curve"] != folded[1]["dev_curve"]


def test_vmap_and_one_after_another_agree(tiny_backbone, tiny_conll, tmp_path):
    runs = {
        v: run_together([engine_config(tiny_backbone, tiny_conll, tmp_path / str(v), save_model=True)], vectorize=v)
        for v in (False, True)
    }
    assert [p["f1"] for p in runs[False][0]["dev_curve"]] == pytest.approx(
        [p["f1"] for p in runs[True][0]["dev_curve"]], abs=1e-6
    )
    mine, theirs = head_weights(tmp_path / "False"), head_weights(tmp_path / "True")
    for name in mine:
        torch.testing.assert_close(mine[name], theirs[name], rtol=1e-4, atol=1e-5, msg=name)
