"""Epoch budgets trained together (dwatt.stacked_heads): each ends as it would alone, and agrees with the Trainer."""

import json

import pytest
import torch
from safetensors.torch import load_file

from dwatt.experiment.grid import batches_of_runs, grid
from dwatt.experiment.sweep import run_sweep
from dwatt import RobertaDWAttForTokenClassification
from dwatt.training import InitialModels, RunConfig, run_ner, run_together


def config(tiny_backbone, tiny_conll, folder, **kwargs) -> RunConfig:
    defaults = dict(backbone=str(tiny_backbone), data_dir=str(tiny_conll), n_shot=2, epochs=3, batch_size=3,
                    learning_rate=5e-3, output_dir=str(folder), progress=False, cache_dtype="float32", save_model=False)
    return RunConfig(**(defaults | kwargs))


def weights(folder) -> dict[str, torch.Tensor]:
    return {k: v for k, v in load_file(str(folder / "model" / "model.safetensors")).items() if "backbone" not in k}


@pytest.mark.parametrize("vectorize", [False, True], ids=["one-after-another", "vmap"])
@pytest.mark.parametrize("fusion", ["dwatt", "base_plus_n", "scalar_mix_dropout"])  # random draws in the fusion too
def test_budgets_trained_together_end_as_each_budget_alone(tiny_backbone, tiny_conll, tmp_path, fusion, vectorize):
    # Dropout is on (classifier, and Base+n's extra layers), several batches per epoch, three budgets.
    budgets = (1, 3, 2)
    make = lambda e, where: config(tiny_backbone, tiny_conll, tmp_path / where / str(e), fusion=fusion, epochs=e, save_model=True)
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


ENGINES = {"linear-probes": dict(linear_probes=True), "one-after-another": dict(linear_probes=False, vectorize=False),
           "vmap": dict(linear_probes=False, vectorize=True)}


@pytest.mark.parametrize("engine", ENGINES)
def test_heads_on_each_layer_at_several_learning_rates_end_as_each_alone(tiny_backbone, tiny_conll, tmp_path, engine):
    """A probe: a Base head on each layer at each learning rate, trained together on one cache of every layer, each
    ends as that head trained alone on its own layer's cache, dev curve, weights and test scores alike."""
    runs = [(layer, rate) for layer in ("1", "2", "3") for rate in (5e-3, 5e-2)]
    def make(layer, rate, where):
        return config(tiny_backbone, tiny_conll, tmp_path / where / f"{layer}-{rate}", fusion="base", layers=layer,
                      learning_rate=rate, epochs=2, save_model=True, evaluate_test=True)
    together = run_together([make(layer, rate, "together") for layer, rate in runs], **ENGINES[engine])
    curves = set()
    for (layer, rate), joint in zip(runs, together):
        (alone,) = run_together([make(layer, rate, "alone")], **ENGINES[engine])
        assert joint["dev_curve"] == alone["dev_curve"] and joint["trained_together_runs"] == 6
        assert joint["test_scores"] == pytest.approx(alone["test_scores"], abs=1e-12)
        mine, theirs = weights(tmp_path / "together" / f"{layer}-{rate}"), weights(tmp_path / "alone" / f"{layer}-{rate}")
        assert mine.keys() == theirs.keys() and mine
        for name in theirs:
            torch.testing.assert_close(mine[name], theirs[name], rtol=0, atol=1e-6, msg=name)
        saved = json.loads((tmp_path / "together" / f"{layer}-{rate}" / "model" / "config.json").read_text())
        assert str(saved["fused_layers"]) == layer and joint["config"]["learning_rate"] == rate
        curves.add(tuple(point["f1"] for point in joint["dev_curve"]) + tuple(mine["classifier.weight"].flatten().tolist()))
    assert len(curves) == len(runs)  # every head went its own way: its own layer, its own rate


@pytest.mark.parametrize("dropout", [0.1, 0.0])
def test_linear_probes_compute_what_the_model_computes(tiny_backbone, tiny_conll, tmp_path, dropout):
    """`LinearProbes` (one batched product over the cache's labelled rows) against running the model copy by copy:
    the same dropout masks, losses, weights, dev curves and test scores, on a cache of every token (train, test) and
    of the labelled positions only (dev)."""
    runs = [(layer, rate) for layer in ("1", "3") for rate in (5e-3, 5e-2)]
    results = {}
    for linear in (True, False):
        made = [config(tiny_backbone, tiny_conll, tmp_path / str(linear) / f"{layer}-{rate}", fusion="base",
                       layers=layer, learning_rate=rate, epochs=3, save_model=True, extra={"classifier_dropout": dropout},
                       evaluate_test=True)
                for layer, rate in runs]
        results[linear] = run_together(made, linear_probes=linear, vectorize=False)
    for (layer, rate), fast, model_run in zip(runs, results[True], results[False]):
        assert [p["f1"] for p in fast["dev_curve"]] == pytest.approx([p["f1"] for p in model_run["dev_curve"]], abs=1e-12)
        assert fast["test_scores"] == pytest.approx(model_run["test_scores"], abs=1e-12)
        mine, theirs = (weights(tmp_path / str(linear) / f"{layer}-{rate}") for linear in (True, False))
        for name in theirs:
            torch.testing.assert_close(mine[name], theirs[name], rtol=0, atol=1e-6, msg=name)
    assert len({tuple(r["dev_curve"][-1].values()) for r in results[True]}) > 1


def test_linear_probes_are_refused_where_the_head_is_not_one(tiny_backbone, tiny_conll, tmp_path):
    made = config(tiny_backbone, tiny_conll, tmp_path / "x", fusion="scalar_mix")
    with pytest.raises(ValueError, match="linear_probes: only for a Base token classifier"):
        run_together([made], linear_probes=True)


def test_vmap_and_one_after_another_agree(tiny_backbone, tiny_conll, tmp_path):
    runs = {v: run_together([config(tiny_backbone, tiny_conll, tmp_path / str(v), save_model=True)], vectorize=v) for v in (False, True)}
    assert [p["f1"] for p in runs[False][0]["dev_curve"]] == pytest.approx([p["f1"] for p in runs[True][0]["dev_curve"]], abs=1e-6)
    mine, theirs = weights(tmp_path / "False"), weights(tmp_path / "True")
    for name in mine:
        torch.testing.assert_close(mine[name], theirs[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("fusion", ["dwatt", "concat"])
def test_budgets_agree_with_the_trainer_where_the_batch_order_cannot_matter(tiny_backbone, tiny_conll, tmp_path, fusion):
    # One batch per epoch and no dropout: the only difference left would be the optimisation itself (AdamW, linear
    # decay, clipping), which must be the Trainer's.
    settings = dict(fusion=fusion, batch_size=64, save_model=True, extra={"classifier_dropout": 0.0})
    trainer = run_ner(config(tiny_backbone, tiny_conll, tmp_path / "trainer", **settings))
    (budgets,) = run_together([config(tiny_backbone, tiny_conll, tmp_path / "budgets", **settings)])
    assert trainer["engine"] == "trainer" and budgets["engine"] == "budgets"
    assert [p["step"] for p in trainer["dev_curve"]] == [p["step"] for p in budgets["dev_curve"]] == [1, 2, 3]
    assert [p["f1"] for p in trainer["dev_curve"]] == pytest.approx([p["f1"] for p in budgets["dev_curve"]], abs=1e-9)
    trainer_scores = trainer["best_dev_scores"]
    assert set(trainer_scores) - set(budgets["best_dev_scores"]) == {"loss", "epoch"}  # the Trainer's extras
    assert budgets["best_dev_scores"] == pytest.approx({k: trainer_scores[k] for k in budgets["best_dev_scores"]})
    mine, theirs = weights(tmp_path / "budgets"), weights(tmp_path / "trainer")
    assert mine.keys() == theirs.keys()
    for name in mine:
        torch.testing.assert_close(mine[name], theirs[name], rtol=1e-4, atol=1e-6, msg=name)


def test_runs_trained_together_must_differ_only_in_their_budget(tiny_backbone, tiny_conll, tmp_path):
    first = config(tiny_backbone, tiny_conll, tmp_path / "a")
    with pytest.raises(ValueError, match=r"may differ only in epochs, learning_rate, output_dir, not in \['fusion'\]"):
        run_together([first, config(tiny_backbone, tiny_conll, tmp_path / "b", fusion="concat")])
    with pytest.raises(ValueError, match="only in the FE mode with the feature cache, for these tasks: ner, cls"):
        run_together([config(tiny_backbone, tiny_conll, tmp_path / "c", mode="ft")])


def test_budgets_with_the_same_epochs_twice_are_refused(tiny_backbone, tiny_conll, tmp_path):
    with pytest.raises(ValueError, match=r"HeadCopy\(epochs=2, learning_rate=0.005, layer=None\) comes twice"):
        run_together([config(tiny_backbone, tiny_conll, tmp_path / str(k), epochs=2) for k in range(2)])


def test_sweep_groups_the_budgets_of_an_fe_run_and_nothing_else(tmp_path):
    specs = grid(fusions=("base", "dwatt"), modes=("fe", "ft"), n_shots=(8,), epochs=(2, 4), trials=2)
    groups = batches_of_runs(specs, "auto")
    together = [[s.run_id for s in group] for stacked, group in groups if stacked]
    assert together[0] == ["conll2003/default/fe/base/n8/e2/t0", "conll2003/default/fe/base/n8/e4/t0"]
    assert len(together) == 4 and all(len(g) == 2 for g in together)  # 2 fusions x 2 trials, FE only
    assert sum(len(g) for _, g in groups) == len(specs) and all(len(g) == 1 for stacked, g in groups if not stacked)
    assert not any(stacked for stacked, _ in batches_of_runs(specs, "trainer"))
    assert not any(stacked for stacked, _ in batches_of_runs(specs, "auto", use_cache=False))
    one_budget = grid(fusions=("dwatt",), n_shots=(8,), epochs=(2,), trials=1)
    assert batches_of_runs(one_budget, "auto") == [(False, one_budget)]
    assert batches_of_runs(one_budget, "budgets") == [(True, one_budget)]
    rates = grid(fusions=("dwatt",), n_shots=(8,), epochs=(2,), trials=1, learning_rates=(1e-4, 1e-3))
    assert [s.run_id for s in rates] == ["conll2003/default/fe/dwatt/n8/e2/t0/lr0.0001", "conll2003/default/fe/dwatt/n8/e2/t0/lr0.001"]
    assert batches_of_runs(rates, "auto") == [(True, rates)]
    with pytest.raises(ValueError, match="--engine: unknown engine 'fast'"):
        batches_of_runs(specs, "fast")

    calls = []
    single = lambda c: calls.append(("trainer", c.epochs)) or {"best_dev_f1": 0.1}
    stacked = lambda cs: calls.append(("budgets", [c.epochs for c in cs])) or [{"best_dev_f1": 0.2} for _ in cs]
    rows = run_sweep(specs, tmp_path / "r.jsonl", runner=single, budgets_runner=stacked, progress=False)
    assert calls.count(("budgets", [2, 4])) == 4 and calls.count(("trainer", 2)) == calls.count(("trainer", 4)) == 4
    assert sorted(r["run_id"] for r in rows) == sorted(s.run_id for s in specs)


@pytest.mark.parametrize("fusion", ["dwatt", "base_plus_n", "scalar_mix"])
def test_remembered_initial_models_equal_a_fresh_build(tiny_backbone, fusion):
    from transformers import set_seed

    memo = InitialModels()
    first = memo.build(str(tiny_backbone), fusion, 7, num_labels=5)
    again = memo.build(str(tiny_backbone), fusion, 7, num_labels=5)
    other_seed = memo.build(str(tiny_backbone), fusion, 8, num_labels=5)
    assert (memo.hits, memo.misses) == (1, 2)
    set_seed(7)
    fresh = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion=fusion, num_labels=5)
    for model in (first, again):
        state = model.state_dict()
        assert state.keys() == fresh.state_dict().keys()
        for name, tensor in fresh.state_dict().items():
            assert torch.equal(state[name], tensor), name
        assert not any(t.is_meta for t in (*model.parameters(), *model.buffers()))
    assert again.dwatt.backbone is not first.dwatt.backbone  # a copy: an FT run may change its own
    with torch.no_grad():
        again.classifier.weight.add_(1.0)  # training one model leaves the remembered start alone
    assert torch.equal(memo.build(str(tiny_backbone), fusion, 7, num_labels=5).classifier.weight, fresh.classifier.weight)
    if fusion != "scalar_mix":  # ScalarMix starts from constants, whatever the seed
        assert not torch.equal(other_seed.classifier.weight, fresh.classifier.weight)


def test_a_probe_grid_is_a_base_head_on_each_layer_trained_together_per_sample(tiny_backbone):
    specs = grid(fusions=("base", "dwatt"), n_shots=(8,), epochs=(2,), trials=2, backbones=(str(tiny_backbone),),
                 learning_rates=(1e-3, 1e-2), probe_layers="all")
    base = [s for s in specs if s.fusion == "base"]
    assert len(base) == 2 * 3 * 2 and {s.layers for s in base} == {"1", "2", "3"}  # trials x layers x rates
    assert base[0].run_id.endswith("/fe/base/n8/e2/t0/lr0.001/L1")
    groups = [group for stacked, group in batches_of_runs(specs, "auto") if stacked]
    assert [len(g) for g in groups] == [6, 2, 6, 2]  # per trial: the probe's 6 heads, DWAtt's 2 rates
    assert [s.layers for s in grid(fusions=("base",), n_shots=(8,), epochs=(2,), trials=1,
                                   backbones=(str(tiny_backbone),), probe_layers="1-2")] == ["1", "2"]
    # exactly the layers named: the last only where named, by number, range or step
    for spec, layers in (("every:2", ["2"]), ("every:3", ["3"]), ("2-3", ["2", "3"]), ("1,3", ["1", "3"])):
        assert [s.layers for s in grid(fusions=("base",), n_shots=(8,), epochs=(2,), trials=1,
                                       backbones=(str(tiny_backbone),), probe_layers=spec)] == layers, spec


def test_dwatt_probe_trains_a_head_per_layer_and_rate_and_names_the_layer_chosen_on_dev(tiny_backbone, tiny_conll,
                                                                                         tmp_path, capsys):
    from dwatt.cli import main
    from dwatt.experiment.probe import PROBE_LEARNING_RATES

    results = tmp_path / "probe.jsonl"
    argv = ["probe", "--backbone", str(tiny_backbone), "--data-dir", str(tiny_conll), "--n-shot", "2", "--epochs", "2",
            "--learning-rates", "5e-3,5e-2", "--cache-dtype", "float32", "--results", str(results), "--quiet", "--test"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == 3 * 2 and {r["config"]["layers"] for r in rows} == {"1", "2", "3"}
    assert all(r["trained_together_runs"] == 6 and "f1" in r["test_scores"] for r in rows)
    best = max(rows, key=lambda r: (r["best_dev_f1"], -int(r["config"]["layers"]), -r["config"]["learning_rate"]))
    layer, rate = best["config"]["layers"], best["config"]["learning_rate"]
    assert (f"chosen on dev: layer {layer} of 3 at learning rate {rate:g}: dev F1 {100 * best['best_dev_f1']:.2f}, "
            f"test F1 {100 * best['test_scores']['f1']:.2f}") in printed
    assert printed.splitlines()[1].split() == ["layer", "0.005", "0.05"]
    # its three layers' best heads averaged: the probe's ensemble, beside the choice (no ensemble of 5 of 3 layers)
    (ensemble,) = rows[0]["probe_ensembles"]
    layers = ", ".join(str(member["layer"]) for member in ensemble["members"])
    assert (f"the 3 best layers' heads averaged (layers {layers}; a method of its own, not served yet): dev F1 "
            f"{100 * ensemble['best_f1']:.2f}, test F1 {100 * ensemble['test_scores']['f1']:.2f}") in printed
    # The probe ends in a model: the chosen head, trained again alone, is the probe's own and runs layers 1..k only.
    folder = tmp_path / "chosen" / "model"
    assert f"model: {folder} (runs layers 1-{layer} of 3" in printed and (tmp_path / "probe.png").stat().st_size > 0
    saved = json.loads((tmp_path / "chosen" / "results.json").read_text())
    assert saved["best_dev_f1"] == best["best_dev_f1"] and saved["test_scores"]["f1"] == best["test_scores"]["f1"]
    model = RobertaDWAttForTokenClassification.from_pretrained(folder)
    assert model.config.read_layer == int(layer) and model.dwatt.backbone.config.num_hidden_layers == int(layer)
    card = (folder / "README.md").read_text()
    assert "## How this head was chosen" in card and f"chose layer {layer} at {rate:g}" in card
    assert f"runs layers 1–{layer} of 3" in card or int(layer) == 3
    assert PROBE_LEARNING_RATES == (3e-4, 1e-3, 3e-3, 1e-2)
    model_file = folder / "model.safetensors"
    stamp = model_file.stat().st_mtime_ns
    assert main(argv) == 0  # resumed: nothing left to train, the same rows, the chosen model kept as it is
    assert model_file.stat().st_mtime_ns == stamp
    from dwatt.cli import build_parser

    assert build_parser().parse_args(["probe"]).learning_rates == PROBE_LEARNING_RATES
    assert [json.loads(line) for line in results.read_text().splitlines()] == rows
    assert main(["sweep", "--fusions", "dwatt", "--probe-layers", "all", "--results", str(tmp_path / "x.jsonl")]) == 2
    assert "--probe-layers trains a Base head on each layer: add base to --fusions" in capsys.readouterr().err


def test_a_probe_stopped_after_its_heads_trained_resumes_without_training_them_again(tiny_backbone, tiny_conll, tmp_path, monkeypatch, capsys):
    """Stopped while the test split is scored (after every copy trained), `dwatt probe` run again trains nothing and
    stores what an uninterrupted probe stores."""
    from dwatt.cli import main
    from dwatt.experiment.summaries import comparable
    from dwatt.experiment.store import ResultsStore

    def probe(results):
        return main(["probe", "--backbone", str(tiny_backbone), "--data-dir", str(tiny_conll), "--n-shot", "1",
                     "--epochs", "2", "--learning-rates", "1e-3,1e-2", "--results", str(results), "--quiet", "--test",
                     "--no-save"])

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr("dwatt.training.ner.scored_test_split", stopped)
        with pytest.raises(KeyboardInterrupt):
            probe(tmp_path / "stopped" / "r.jsonl")
    assert not (tmp_path / "stopped" / "r.jsonl").exists()
    assert len(list((tmp_path / "stopped").rglob("dwatt_trained.json"))) == 3 * 2  # 3 layers x 2 rates, all final

    def trains(*args, **kwargs):
        raise AssertionError("trained again")

    with monkeypatch.context() as patched:
        patched.setattr("dwatt.stacked_heads.train_heads", trains)
        assert probe(tmp_path / "stopped" / "r.jsonl") == 0
    assert probe(tmp_path / "straight" / "r.jsonl") == 0
    capsys.readouterr()

    def kept(row):
        row = comparable(row)
        row["config"] = {k: v for k, v in row["config"].items() if k != "output_dir"}
        return {k: v for k, v in row.items() if k not in ("cache_seconds",)}

    resumed, straight = (ResultsStore(tmp_path / name / "r.jsonl").rows() for name in ("stopped", "straight"))
    assert len(resumed) == 6 and [kept(r) for r in resumed] == [kept(r) for r in straight]
    assert not list((tmp_path / "stopped").rglob("dwatt_trained.*"))  # the records go once the results are written


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
        loss = lambda p: ((x @ p["weight"].T + p["bias"]) ** 2).mean()
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


@pytest.mark.parametrize("fusion", ["base", "dwatt"])
def test_a_few_shot_dev_sample_chooses_its_own_epoch_and_changes_nothing_else(tiny_backbone, tiny_conll, tmp_path, fusion):
    """With few_shot_dev, each run also chooses its epoch on a dev sample as large as its training sample: the
    run's own curve, choice and test scores stay as they are; the sample's choice is the best of its curve, and its
    test scores are those of that epoch's weights (linear probes and the model alike); the last epoch's weights are
    scored on test too (the no-dev protocol)."""
    layers = ("1", "3") if fusion == "base" else ("all",)
    def made(few_shot_dev, where, **kwargs):
        return [config(tiny_backbone, tiny_conll, tmp_path / where / f"{layer}-{rate}", fusion=fusion, layers=layer,
                       learning_rate=rate, epochs=4, evaluate_test=True, few_shot_dev=few_shot_dev)
                for layer in layers for rate in (5e-3, 5e-2)]
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
        assert last["epoch"] == 4 and last["test_scores"] == pytest.approx(theirs["last_epoch"]["test_scores"], abs=1e-6)
        if mine["best_epoch"] == 4:
            assert last["test_scores"] == pytest.approx(mine["test_scores"], abs=1e-12)
    with pytest.raises(ValueError, match="few_shot_dev: the choice on a few-shot dev sample is made by runs trained together"):
        run_ner(made(True, "trainer")[0])
