"""Runs trained together (dwatt.training.together): what may differ between them, and a few-shot dev sample that chooses
its own epoch. That copies trained together end as each alone: test_stacked_heads."""

import pytest

from dwatt.training import run_ner, run_together

from .helpers import tiny_ner_run_config


def test_runs_trained_together_must_differ_only_in_their_budget(tiny_backbone, tiny_conll, tmp_path):
    first = tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "a", save_model=False)
    with pytest.raises(ValueError, match=r"may differ only in epochs, learning_rate, output_dir, not in \['fusion'\]"):
        run_together(
            [first, tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "b", save_model=False, fusion="concat")]
        )
    with pytest.raises(ValueError, match="only in the FE mode with the feature cache, for these tasks: ner, cls"):
        run_together([tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "c", save_model=False, mode="ft")])


def test_budgets_with_the_same_epochs_twice_are_refused(tiny_backbone, tiny_conll, tmp_path):
    with pytest.raises(ValueError, match=r"HeadCopy\(epochs=2, learning_rate=0.005, layer=None\) comes twice"):
        run_together(
            [
                tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / str(k), save_model=False, epochs=2)
                for k in range(2)
            ]
        )


@pytest.mark.parametrize("fusion", ["base", "dwatt"])
def test_a_few_shot_dev_sample_chooses_its_own_epoch_and_changes_nothing_else(
    tiny_backbone, tiny_conll, tmp_path, fusion
):
    """With few_shot_dev, each run also chooses its epoch on a dev sample as large as its training sample: the
    run's own curve, choice and test scores stay as they are; the sample's choice is the best of its curve, and its
    test scores are those of that epoch's weights (linear probes and the model alike); the last epoch's weights are
    scored on test too (the no-dev protocol)."""
    layers = ("1", "3") if fusion == "base" else ("all",)

    def made(few_shot_dev, where, **kwargs):
        return [
            tiny_ner_run_config(
                tiny_backbone,
                tiny_conll,
                tmp_path / where / f"{layer}-{rate}",
                fusion=fusion,
                layers=layer,
                learning_rate=rate,
                batch_size=3,
                save_model=False,
                epochs=4,
                evaluate_test=True,
                few_shot_dev=few_shot_dev,
            )
            for layer in layers
            for rate in (5e-3, 5e-2)
        ]

    plain = run_together(made(False, "plain"))
    sampled = run_together(made(True, "sampled"))
    model_path = run_together(made(True, "model"), linear_probes=False, vectorize=False)
    for alone, mine, theirs in zip(plain, sampled, model_path):
        assert [p["f1"] for p in mine["dev_curve"]] == [p["f1"] for p in alone["dev_curve"]]
        assert mine["test_scores"] == pytest.approx(alone["test_scores"]) and "few_shot_dev" not in alone
        chosen = mine["few_shot_dev"]
        curve = [p["sample_f1"] for p in mine["dev_curve"]]
        assert chosen["sentences"] == mine["num_train_sentences"] and chosen["best_f1"] == max(curve)
        assert chosen["best_epoch"] == mine["dev_curve"][curve.index(max(curve))]["epoch"]
        assert chosen["test_scores"] == pytest.approx(theirs["few_shot_dev"]["test_scores"], abs=1e-6)
        # and the weights of the last epoch, which a user with no dev set keeps
        last = mine["last_epoch"]
        assert last["epoch"] == 4 and last["test_scores"] == pytest.approx(
            theirs["last_epoch"]["test_scores"], abs=1e-6
        )
        if mine["best_epoch"] == 4:
            assert last["test_scores"] == pytest.approx(mine["test_scores"], abs=1e-12)
    with pytest.raises(
        ValueError, match="few_shot_dev: the choice on a few-shot dev sample is made by runs trained together"
    ):
        run_ner(made(True, "trainer")[0])


@pytest.mark.parametrize("linear_probes", [None, False])
def test_a_copy_s_weights_are_scored_on_test_once_whichever_choices_fell_on_their_epoch(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch, linear_probes
):
    """One epoch: the dev set's choice, the few-shot sample's and the last epoch are the same weights, which are scored
    on test once (one pass of the linear probes over every copy, or one evaluation a copy on the model's path),
    giving the three choices the same scores."""
    import dwatt.linear_probes as linear_probes
    import dwatt.training.together as together

    passes = []
    evaluate, predict = together.evaluate_features, linear_probes.LinearProbes.predict.__func__
    monkeypatch.setattr(together, "evaluate_features", lambda *a, **k: passes.append("model") or evaluate(*a, **k))
    monkeypatch.setattr(
        linear_probes.LinearProbes,
        "predict",
        classmethod(lambda cls, *a, **k: passes.append("probes") or predict(cls, *a, **k)),
    )
    configs = [
        tiny_ner_run_config(
            tiny_backbone,
            tiny_conll,
            tmp_path / f"{layer}-{rate}",
            fusion="base",
            layers=layer,
            learning_rate=rate,
            batch_size=3,
            save_model=False,
            epochs=1,
            evaluate_test=True,
            few_shot_dev=True,
        )
        for layer in ("1", "3")
        for rate in (5e-3, 5e-2)
    ]
    results = run_together(configs, **({} if linear_probes is None else {"linear_probes": False, "vectorize": False}))
    assert passes == (["probes"] if linear_probes is None else ["model"] * len(configs))
    for result in results:
        assert result["few_shot_dev"]["test_scores"] == result["last_epoch"]["test_scores"] == result["test_scores"]
