"""Probes run as one product per layer (dwatt.linear_probes): they compute what the model computes, and are refused
where the head is not one linear map of a layer."""

import pytest
import torch

from dwatt.training import run_together

from .helpers import engine_config, head_weights


@pytest.mark.parametrize("dropout", [0.1, 0.0])
def test_linear_probes_compute_what_the_model_computes(tiny_backbone, tiny_conll, tmp_path, dropout):
    """`LinearProbes` (one batched product over the cache's labelled rows) against running the model copy by copy:
    the same dropout masks, losses, weights, dev curves and test scores, on a cache of every token (train, test) and
    of the labelled positions only (dev)."""
    runs = [(layer, rate) for layer in ("1", "3") for rate in (5e-3, 5e-2)]
    results = {}
    for linear in (True, False):
        made = [
            engine_config(
                tiny_backbone,
                tiny_conll,
                tmp_path / str(linear) / f"{layer}-{rate}",
                fusion="base",
                layers=layer,
                learning_rate=rate,
                epochs=3,
                save_model=True,
                extra={"classifier_dropout": dropout},
                evaluate_test=True,
            )
            for layer, rate in runs
        ]
        results[linear] = run_together(made, linear_probes=linear, vectorize=False)
    for (layer, rate), fast, model_run in zip(runs, results[True], results[False]):
        assert [p["f1"] for p in fast["dev_curve"]] == pytest.approx(
            [p["f1"] for p in model_run["dev_curve"]], abs=1e-12
        )
        assert fast["test_scores"] == pytest.approx(model_run["test_scores"], abs=1e-12)
        mine, theirs = (head_weights(tmp_path / str(linear) / f"{layer}-{rate}") for linear in (True, False))
        for name in theirs:
            torch.testing.assert_close(mine[name], theirs[name], rtol=0, atol=1e-6, msg=name)
    assert len({tuple(r["dev_curve"][-1].values()) for r in results[True]}) > 1


def test_linear_probes_are_refused_where_the_head_is_not_one(tiny_backbone, tiny_conll, tmp_path):
    made = engine_config(tiny_backbone, tiny_conll, tmp_path / "x", fusion="scalar_mix")
    with pytest.raises(ValueError, match="linear_probes: only for a Base token classifier"):
        run_together([made], linear_probes=True)
