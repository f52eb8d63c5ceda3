"""Epoch budgets trained together (dwatt.stacked_heads): each ends as it would alone, and agrees with the Trainer."""

import json

import pytest
import torch
from safetensors.torch import load_file

from dwatt.training import RunConfig, run_ner, run_together


def config(tiny_backbone, tiny_conll, folder, **kwargs) -> RunConfig:
    defaults = dict(
        backbone=str(tiny_backbone),
        data_dir=str(tiny_conll),
        n_shot=2,
        epochs=3,
        batch_size=3,
        learning_rate=5e-3,
        output_dir=str(folder),
        progress=False,
        cache_dtype="float32",
        save_model=False,
    )
    return RunConfig(**(defaults | kwargs))


def weights(folder) -> dict[str, torch.Tensor]:
    return {k: v for k, v in load_file(str(folder / "model" / "model.safetensors")).items() if "backbone" not in k}


@pytest.mark.parametrize("vectorize", [False, True], ids=["one-after-another", "vmap"])
@pytest.mark.parametrize("fusion", ["dwatt", "base_plus_n", "scalar_mix_dropout"])  # random draws in the fusion too
def test_budgets_trained_together_end_as_each_budget_alone(tiny_backbone, tiny_conll, tmp_path, fusion, vectorize):
    # Dropout is on (classifier, and Base+n's extra layers), several batches per epoch, three budgets.
    budgets = (1, 3, 2)
    make = lambda e, where: config(
        tiny_backbone, tiny_conll, tmp_path / where / str(e), fusion=fusion, epochs=e, save_model=True
    )
    together = run_together([make(e, "together") for e in budgets], vectorize=vectorize)
    for e, joint in zip(budgets, together):
        (alone,) = run_together([make(e, "alone")], vectorize=vectorize)
        assert joint["dev_curve"] == alone["dev_curve"] and len(joint["dev_curve"]) == e
        assert joint["trained_together"] == list(budgets) and alone["trained_together"] == [e]
        mine, theirs = weights(tmp_path / "together" / str(e)), weights(tmp_path / "alone" / str(e))
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
        return config(
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
            weights(tmp_path / "together" / f"{layer}-{rate}"),
            weights(tmp_path / "alone" / f"{layer}-{rate}"),
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
            config(
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

    monkeypatch.setattr("dwatt.stacked_heads.train_heads", stopped_after_one_part)
    with pytest.raises(KeyboardInterrupt):
        run_together(group("parts"), train_in_parts=4)
    assert parts == [4, 2] and len(list((tmp_path / "parts").rglob("dwatt_trained.json"))) == 4
    parts.clear()
    monkeypatch.setattr(
        "dwatt.stacked_heads.train_heads", lambda *a, **k: parts.append(len(a[4])) or real_train_heads(*a, **k)
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
    from dwatt.features import WORKING_MARGIN, model_nbytes
    from dwatt.stacked_heads import train_heads as real_train_heads
    from dwatt.training.common import INITIAL_MODELS
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
        "dwatt.stacked_heads.train_heads", lambda *a, **k: parts.append(len(a[4])) or real_train_heads(*a, **k)
    )

    def group(where, budget):
        return [
            config(
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

    monkeypatch.setattr("dwatt.stacked_heads.train_heads", recording)
    configs = [
        config(tiny_backbone, tiny_conll, tmp_path / str(rate), fusion="dwatt", learning_rate=rate, epochs=2)
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


@pytest.mark.parametrize("dropout", [0.1, 0.0])
def test_linear_probes_compute_what_the_model_computes(tiny_backbone, tiny_conll, tmp_path, dropout):
    """`LinearProbes` (one batched product over the cache's labelled rows) against running the model copy by copy:
    the same dropout masks, losses, weights, dev curves and test scores, on a cache of every token (train, test) and
    of the labelled positions only (dev)."""
    runs = [(layer, rate) for layer in ("1", "3") for rate in (5e-3, 5e-2)]
    results = {}
    for linear in (True, False):
        made = [
            config(
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
        mine, theirs = (weights(tmp_path / str(linear) / f"{layer}-{rate}") for linear in (True, False))
        for name in theirs:
            torch.testing.assert_close(mine[name], theirs[name], rtol=0, atol=1e-6, msg=name)
    assert len({tuple(r["dev_curve"][-1].values()) for r in results[True]}) > 1


def test_linear_probes_are_refused_where_the_head_is_not_one(tiny_backbone, tiny_conll, tmp_path):
    made = config(tiny_backbone, tiny_conll, tmp_path / "x", fusion="scalar_mix")
    with pytest.raises(ValueError, match="linear_probes: only for a Base token classifier"):
        run_together([made], linear_probes=True)


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
            config(
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
        v: run_together([config(tiny_backbone, tiny_conll, tmp_path / str(v), save_model=True)], vectorize=v)
        for v in (False, True)
    }
    assert [p["f1"] for p in runs[False][0]["dev_curve"]] == pytest.approx(
        [p["f1"] for p in runs[True][0]["dev_curve"]], abs=1e-6
    )
    mine, theirs = weights(tmp_path / "False"), weights(tmp_path / "True")
    for name in mine:
        torch.testing.assert_close(mine[name], theirs[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("fusion", ["dwatt", "concat"])
def test_budgets_agree_with_the_trainer_where_the_batch_order_cannot_matter(
    tiny_backbone, tiny_conll, tmp_path, fusion
):
    # One batch per epoch and no dropout: the only difference left would be the optimisation itself (AdamW, linear
    # decay, clipping), which must be the Trainer's.
    settings = dict(fusion=fusion, batch_size=64, save_model=True, extra={"classifier_dropout": 0.0})
    trainer = run_ner(config(tiny_backbone, tiny_conll, tmp_path / "trainer", **settings))
    (budgets,) = run_together([config(tiny_backbone, tiny_conll, tmp_path / "budgets", **settings)])
    assert trainer["engine"] == "trainer" and budgets["engine"] == "stacked"
    assert [p["step"] for p in trainer["dev_curve"]] == [p["step"] for p in budgets["dev_curve"]] == [1, 2, 3]
    assert [p["f1"] for p in trainer["dev_curve"]] == pytest.approx([p["f1"] for p in budgets["dev_curve"]], abs=1e-9)
    trainer_scores = trainer["best_dev_scores"]
    assert set(trainer_scores) - set(budgets["best_dev_scores"]) == {"loss", "epoch"}  # the Trainer's extras
    assert budgets["best_dev_scores"] == pytest.approx({k: trainer_scores[k] for k in budgets["best_dev_scores"]})
    mine, theirs = weights(tmp_path / "budgets"), weights(tmp_path / "trainer")
    assert mine.keys() == theirs.keys()
    for name in mine:
        torch.testing.assert_close(mine[name], theirs[name], rtol=1e-4, atol=1e-6, msg=name)


def test_stacked_adamw_steps_each_copy_as_torch_adamw_with_its_schedule_and_clipping():
    """`StackedAdamW` against one `torch.optim.AdamW` + linear schedule + `clip_grad_norm_` per copy: copies with
    their own rates and budgets, a copy leaving when its budget ends, gradients large enough to be clipped."""
    from transformers import get_linear_schedule_with_warmup

    from dwatt.stacked_heads import ADAMW, StackedAdamW

    torch.manual_seed(0)
    start = {"weight": torch.randn(5, 7), "bias": torch.randn(5)}
    rates, budgets = [1e-3, 3e-2, 1e-1], [6, 4, 6]
    stacked = {name: t.unsqueeze(0).repeat(3, *[1] * t.dim()).requires_grad_() for name, t in start.items()}
    optimizer = StackedAdamW(stacked, rates, budgets, max_grad_norm=1.0)
    alone = [{name: t.clone().requires_grad_() for name, t in start.items()} for _ in rates]
    optimizers = [torch.optim.AdamW(p.values(), lr=r, **ADAMW) for p, r in zip(alone, rates)]
    schedules = [get_linear_schedule_with_warmup(o, 0, b) for o, b in zip(optimizers, budgets)]
    for step in range(max(budgets)):
        active = [k for k, b in enumerate(budgets) if b > step]
        x = torch.randn(4, 7) * (10 if step % 2 else 0.1)  # every other step clipped
        loss = lambda p, x=x: ((x @ p["weight"].T + p["bias"]) ** 2).mean()
        sum(loss({n: t[k] for n, t in stacked.items()}) for k in active).backward()
        optimizer.step(active)
        for k in active:
            loss(alone[k]).backward()
            torch.nn.utils.clip_grad_norm_(alone[k].values(), 1.0)
            optimizers[k].step()
            schedules[k].step()
            optimizers[k].zero_grad(set_to_none=True)
        for k in range(3):
            for name in start:
                torch.testing.assert_close(stacked[name][k], alone[k][name], rtol=0, atol=0, msg=f"{name} {k} {step}")
    assert all(t.grad is None for t in stacked.values())
