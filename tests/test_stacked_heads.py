"""Epoch budgets trained together (dwatt.stacked_heads): each ends as it would alone, and agrees with the Trainer."""

import json

import pytest
import torch

from dwatt.training import run_ner, run_together

from .helpers import engine_config, head_weights


@pytest.mark.parametrize("vectorize", [False, True], ids=["one-after-another", "vmap"])
@pytest.mark.parametrize("fusion", ["dwatt", "base_plus_n", "scalar_mix_dropout"])  # random draws in the fusion too
def test_budgets_trained_together_end_as_each_budget_alone(tiny_backbone, tiny_conll, tmp_path, fusion, vectorize):
    # Dropout is on (classifier, and Base+n's extra layers), several batches per epoch, three budgets.
    budgets = (1, 3, 2)
    make = lambda e, where: engine_config(
        tiny_backbone, tiny_conll, tmp_path / where / str(e), fusion=fusion, epochs=e, save_model=True
    )
    together = run_together([make(e, "together") for e in budgets], vectorize=vectorize)
    for e, joint in zip(budgets, together):
        (alone,) = run_together([make(e, "alone")], vectorize=vectorize)
        assert joint["dev_curve"] == alone["dev_curve"] and len(joint["dev_curve"]) == e
        assert joint["trained_together"] == list(budgets) and alone["trained_together"] == [e]
        mine, theirs = head_weights(tmp_path / "together" / str(e)), head_weights(tmp_path / "alone" / str(e))
        for name in theirs:
            torch.testing.assert_close(mine[name], theirs[name], rtol=0, atol=1e-6, msg=name)
    # The budgets differ only by their schedule: the longer ones have moved further from the shared start.
    assert together[0]["dev_curve"][0]["step"] == together[1]["dev_curve"][0]["step"] > 1


ENGINES = {
    "linear-probes": dict(linear_probes=True),
    "one-after-another": dict(linear_probes=False, vectorize=False),
    "vmap": dict(linear_probes=False, vectorize=True),
}


@pytest.mark.parametrize("engine", ENGINES)
def test_heads_on_each_layer_at_several_learning_rates_end_as_each_alone(tiny_backbone, tiny_conll, tmp_path, engine):
    """A probe: a Base head on each layer at each learning rate, trained together on one cache of every layer, each
    ends as that head trained alone on its own layer's cache, dev curve, weights and test scores alike."""
    runs = [(layer, rate) for layer in ("1", "2", "3") for rate in (5e-3, 5e-2)]

    def make(layer, rate, where):
        return engine_config(
            tiny_backbone,
            tiny_conll,
            tmp_path / where / f"{layer}-{rate}",
            fusion="base",
            layers=layer,
            learning_rate=rate,
            epochs=2,
            save_model=True,
            evaluate_test=True,
        )

    together = run_together([make(layer, rate, "together") for layer, rate in runs], **ENGINES[engine])
    curves = set()
    for (layer, rate), joint in zip(runs, together):
        (alone,) = run_together([make(layer, rate, "alone")], **ENGINES[engine])
        assert joint["dev_curve"] == alone["dev_curve"] and joint["trained_together_runs"] == 6
        assert joint["test_scores"] == pytest.approx(alone["test_scores"], abs=1e-12)
        mine, theirs = (
            head_weights(tmp_path / "together" / f"{layer}-{rate}"),
            head_weights(tmp_path / "alone" / f"{layer}-{rate}"),
        )
        assert mine.keys() == theirs.keys() and mine
        for name in theirs:
            torch.testing.assert_close(mine[name], theirs[name], rtol=0, atol=1e-6, msg=name)
        saved = json.loads((tmp_path / "together" / f"{layer}-{rate}" / "model" / "config.json").read_text())
        assert str(saved["fused_layers"]) == layer and joint["config"]["learning_rate"] == rate
        curves.add(
            tuple(point["f1"] for point in joint["dev_curve"]) + tuple(mine["classifier.weight"].flatten().tolist())
        )
    assert len(curves) == len(runs)  # every head went its own way: its own layer, its own rate


def test_a_probe_trained_in_parts_and_stopped_between_them_ends_as_one_trained_whole(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    """`train_in_parts`: a probe's heads trained 4 at a time, stopped after the first part, run again, trains only the
    other part, and its runs (dev curves, test scores, few-shot choices, the probe's ensembles over every layer) are
    those of the group trained whole."""
    from dwatt.schema import ENSEMBLES_FIELD
    from dwatt.stacked_heads import train_heads as real_train_heads

    runs = [(layer, rate) for layer in ("1", "2", "3") for rate in (5e-3, 5e-2)]

    def group(where):
        return [
            engine_config(
                tiny_backbone,
                tiny_conll,
                tmp_path / where / f"{layer}-{rate}",
                fusion="base",
                layers=layer,
                learning_rate=rate,
                epochs=2,
                evaluate_test=True,
                few_shot_dev=True,
            )
            for layer, rate in runs
        ]

    whole = run_together(group("whole"))
    parts = []

    def stopped_after_one_part(*args, **kwargs):
        parts.append(len(args[4]))
        if len(parts) > 1:
            raise KeyboardInterrupt
        return real_train_heads(*args, **kwargs)

    monkeypatch.setattr("dwatt.training.together.train_heads", stopped_after_one_part)
    with pytest.raises(KeyboardInterrupt):
        run_together(group("parts"), train_in_parts=4)
    assert parts == [4, 2] and len(list((tmp_path / "parts").rglob("dwatt_trained.json"))) == 4
    parts.clear()
    monkeypatch.setattr(
        "dwatt.training.together.train_heads", lambda *a, **k: parts.append(len(a[4])) or real_train_heads(*a, **k)
    )
    resumed = run_together(group("parts"), train_in_parts=4)
    assert parts == [2]  # the part that had ended is not trained again
    assert whole[0][ENSEMBLES_FIELD] and resumed[0][ENSEMBLES_FIELD] == whole[0][ENSEMBLES_FIELD]
    assert {m["layer"] for entry in whole[0][ENSEMBLES_FIELD] for m in entry["members"]} <= {1, 2, 3}
    assert whole[0][ENSEMBLES_FIELD][0]["candidates"]["layers"] == [1, 2, 3]
    for mine, theirs in zip(resumed, whole):
        assert mine["dev_curve"] == theirs["dev_curve"] and mine["few_shot_dev"] == theirs["few_shot_dev"]
        assert mine["test_scores"] == pytest.approx(theirs["test_scores"], abs=1e-12)
    with pytest.raises(ValueError, match="train_in_parts: expected a positive"):
        run_together(group("zero"), train_in_parts=0)


def test_copies_that_do_not_fit_the_memory_budget_together_train_in_parts_and_end_as_trained_whole(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    """Under `max_memory`, DWAtt at three rates, whose copies fit the budget two at a time (16 bytes a trained weight
    beside the model, the caches and the working margin), trains as parts of two and one, and its runs are those of
    the group trained whole; without a budget, or with room for all, in one part."""
    from dwatt.features.memory import WORKING_MARGIN, model_nbytes
    from dwatt.stacked_heads import train_heads as real_train_heads
    from dwatt.training.initial_models import INITIAL_MODELS
    from dwatt.training.run_caches import FEATURE_MEMO
    from dwatt.training.together import TRAINING_BYTES_PER_WEIGHT, copies_within_budget, trained_weights

    rates = (5e-3, 2e-2, 5e-2)
    model = INITIAL_MODELS.build(str(tiny_backbone), "dwatt", 42)
    per_copy = TRAINING_BYTES_PER_WEIGHT * trained_weights(model)
    FEATURE_MEMO.clear()
    room = lambda copies: model_nbytes(model) + WORKING_MARGIN + int(copies * per_copy)
    assert [copies_within_budget(model, 3, budget) for budget in (None, room(3), room(2.5), room(1.2), room(0))] == [
        3,
        3,
        2,
        1,
        1,
    ]

    parts = []
    monkeypatch.setattr(
        "dwatt.training.together.train_heads", lambda *a, **k: parts.append(len(a[4])) or real_train_heads(*a, **k)
    )

    def group(where, budget):
        return [
            engine_config(
                tiny_backbone,
                tiny_conll,
                tmp_path / where / str(rate),
                fusion="dwatt",
                learning_rate=rate,
                epochs=2,
                evaluate_test=True,
                max_memory=budget,
            )
            for rate in rates
        ]

    whole = run_together(group("whole", None))
    assert parts == [3]
    parts.clear()
    in_parts = run_together(group("parts", room(2.5) + FEATURE_MEMO.memory_bytes()))  # the caches held: the group's
    assert parts == [2, 1]
    for mine, theirs in zip(in_parts, whole):
        assert [p["f1"] for p in mine["dev_curve"]] == pytest.approx([p["f1"] for p in theirs["dev_curve"]], abs=1e-9)
        assert mine["test_scores"] == pytest.approx(theirs["test_scores"], abs=1e-9)


def test_a_group_holds_its_copies_states_from_their_kept_files_not_from_training(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    """Each copy's states, kept in its run folder as its part ends, are what the group holds from then on (read back
    memory-mapped), not the tensors training made: a group's states do not pile up in memory over its parts. The
    group's runs are those of a group whose states stayed in memory (the parts test above checks the same path)."""
    from dwatt.stacked_heads import train_heads as real_train_heads
    from dwatt.training import together

    trained = []

    def recording(*args, **kwargs):
        outcomes, timings = real_train_heads(*args, **kwargs)
        trained.extend(outcomes)
        return outcomes, timings

    monkeypatch.setattr("dwatt.training.together.train_heads", recording)
    configs = [
        engine_config(tiny_backbone, tiny_conll, tmp_path / str(rate), fusion="dwatt", learning_rate=rate, epochs=2)
        for rate in (5e-3, 5e-2)
    ]
    plan = together.plan_together(configs)
    parts = together.procedures(plan.first.task).prepare_together(plan.first, plan.cache_layers)
    held, _ = together.train_together(plan, parts, None, None, 1)
    assert len(trained) == 2
    for mine, theirs in zip(held, trained):
        assert mine is not theirs and mine.best_state.keys() == theirs.best_state.keys()
        assert all(mine.best_state[name] is not tensor for name, tensor in theirs.best_state.items())
        for name, tensor in theirs.best_state.items():
            torch.testing.assert_close(mine.best_state[name], tensor, rtol=0, atol=0)
        assert mine.curve == theirs.curve and mine.best == theirs.best


@pytest.mark.parametrize("fusion", ["dwatt", "concat"])
def test_budgets_agree_with_the_trainer_where_the_batch_order_cannot_matter(
    tiny_backbone, tiny_conll, tmp_path, fusion
):
    # One batch per epoch and no dropout: the only difference left would be the optimisation itself (AdamW, linear
    # decay, clipping), which must be the Trainer's.
    settings = dict(fusion=fusion, batch_size=64, save_model=True, extra={"classifier_dropout": 0.0})
    trainer = run_ner(engine_config(tiny_backbone, tiny_conll, tmp_path / "trainer", **settings))
    (budgets,) = run_together([engine_config(tiny_backbone, tiny_conll, tmp_path / "budgets", **settings)])
    assert trainer["engine"] == "trainer" and budgets["engine"] == "stacked"
    assert [p["step"] for p in trainer["dev_curve"]] == [p["step"] for p in budgets["dev_curve"]] == [1, 2, 3]
    assert [p["f1"] for p in trainer["dev_curve"]] == pytest.approx([p["f1"] for p in budgets["dev_curve"]], abs=1e-9)
    trainer_scores = trainer["best_dev_scores"]
    assert set(trainer_scores) - set(budgets["best_dev_scores"]) == {"loss", "epoch"}  # the Trainer's extras
    assert budgets["best_dev_scores"] == pytest.approx({k: trainer_scores[k] for k in budgets["best_dev_scores"]})
    mine, theirs = head_weights(tmp_path / "budgets"), head_weights(tmp_path / "trainer")
    assert mine.keys() == theirs.keys()
    for name in mine:
        torch.testing.assert_close(mine[name], theirs[name], rtol=1e-4, atol=1e-6, msg=name)
