"""Probe ensembles (dwatt.training.probe_ensembles): the top layers' heads of a probe, their probabilities averaged."""

import pytest

import dwatt.training.probe_ensembles as probe_ensembles
from dwatt.schema import ENSEMBLES_FIELD, ranked_members
from dwatt.training import RunConfig, run_together


def test_members_are_each_layers_best_rate_ranked_by_that_score():
    layers = [1, 1, 2, 2, 3, 3]
    scores = [0.2, 0.5, 0.7, 0.1, None, 0.5]
    # layer 2 (copy 2: 0.7), then layers 1 and 3 tie at 0.5: the first met (layer 1, copy 1) first
    assert ranked_members(layers, scores) == [2, 1, 5]
    assert ranked_members(layers, [None] * 6) == []


@pytest.mark.parametrize("few_shot_dev", [False, True], ids=["dev", "few-shot-dev"])
def test_an_ensemble_of_one_is_the_best_single_layer_and_larger_ones_take_the_next_layers(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch, few_shot_dev
):
    """With sizes 1 and 3: the ensemble of one scores on test what the probe's run chosen on dev scores (its own
    head, scored by the other path: LinearProbes' one product per layer); the ensemble of three holds the three
    layers' best-dev heads in the order of their dev scores, among the candidates the group had."""
    monkeypatch.setattr(probe_ensembles, "ENSEMBLE_SIZES", (1, 3, 5))
    runs = [(layer, rate) for layer in ("1", "2", "3") for rate in (1e-3, 3e-3)]  # half-trained: layers differ
    configs = [
        RunConfig(
            backbone=str(tiny_backbone),
            data_dir=str(tiny_conll),
            n_shot=2,
            epochs=2,
            batch_size=3,
            fusion="base",
            layers=layer,
            learning_rate=rate,
            output_dir=str(tmp_path / f"{layer}-{rate}"),
            progress=False,
            cache_dtype="float32",
            save_model=False,
            evaluate_test=True,
            few_shot_dev=few_shot_dev,
        )
        for layer, rate in runs
    ]
    results = run_together(configs)
    ensembles = results[0][ENSEMBLES_FIELD]
    assert all(ENSEMBLES_FIELD not in r for r in results[1:])  # the group's, held once
    assert [e["size"] for e in ensembles] == [1, 3]  # no ensemble of 5 layers from a probe of 3
    assert ensembles[0]["candidates"] == {"layers": [1, 2, 3], "learning_rates": [1e-3, 3e-3]}
    chosen_on = [("dev", lambda r: r["best_dev_f1"], lambda e: e, "f1")]
    if few_shot_dev:
        chosen_on.append(
            ("few-shot dev", lambda r: r["few_shot_dev"]["best_f1"], lambda e: e["few_shot_dev"], "sample_f1")
        )
    for name, dev_score, part, key in chosen_on:
        best = max(results, key=dev_score)  # ties: the first in order, as the ensemble ranks them
        tested = best["test_scores"] if name == "dev" else best["few_shot_dev"]["test_scores"]
        one = part(ensembles[0])
        assert one["test_scores"] == pytest.approx(tested, abs=1e-9), name
        assert [m["layer"] for m in one["members"]] == [int(best["config"]["layers"])], name
        assert one["members"][0]["learning_rate"] == best["config"]["learning_rate"], name
        three = part(ensembles[1])
        per_layer = {}
        for r in results:
            layer = int(r["config"]["layers"])
            per_layer[layer] = max(per_layer.get(layer, -1.0), dev_score(r))
        ranked = sorted(per_layer, key=lambda layer: -per_layer[layer])
        assert [m["layer"] for m in three["members"]] == ranked, name
        assert [m[key] for m in three["members"]] == sorted(per_layer.values(), reverse=True), name
        assert 0.0 <= three["test_scores"]["f1"] <= 1.0 and "best_f1" in three
    if few_shot_dev:
        assert ensembles[0]["few_shot_dev"]["sentences"] == results[0]["few_shot_dev"]["sentences"]
