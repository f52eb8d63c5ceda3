"""Grids of runs (dwatt.experiment.grid): the presets, shards, refusals, and how a spec names its run."""

import pytest

from dwatt.experiment.grid import PAPER_FUSIONS, PRESETS, batches_of_runs, grid
from dwatt.experiment.sweep import run_sweep
from dwatt.training import RunConfig

from .helpers import executing


def test_paper_grid_has_every_combination_once_and_trials_together():
    specs = grid(**PRESETS["conll-fe"])
    assert len(specs) == 5 * 5 * 4 * 5 == len({s.run_id for s in specs})
    trials = [s.trial for s in specs]
    assert trials == sorted(trials)  # all runs of a trial (one sample) come together
    assert specs[0].run_id == "conll2003/roberta-large/fe/base/n8/e25/t0"
    assert len(grid(**PRESETS["conll-fe-vs-ft"])) == 4 * 2 * 2 * 5


def test_presets_cover_every_paper_experiment():
    tiers = grid(**PRESETS["wikiann-tiers"])
    assert len(tiers) == 4 * 27 * 5 and tiers[0].run_id == "wikiann:af/xlm-roberta-large/fe/base/s100/e25/t0"
    assert {s.run_config("r").sampling for s in tiers} == {"sentences"}
    mlm = grid(**PRESETS["wikitext-mlm"])
    assert [s.run_id for s in mlm] == [f"wikitext2/roberta-large/ft/{f}/e3/t0" for f in PAPER_FUSIONS]
    assert {(c.task, c.n_shot, c.mode) for c in (s.run_config("r") for s in mlm)} == {("mlm", None, "ft")}
    large = grid(**PRESETS["base-vs-large"])
    assert {s.backbone for s in large} == {"roberta-base", "roberta-large"} and len(large) == 2 * 4 * 5 * 5
    assert len(grid(**PRESETS["wikiann-en"])) == 4 * 5


@pytest.mark.parametrize(
    "preset, count", [("conll-fe", 4), ("conll-fe", 25), ("conll-fe-vs-ft", 3), ("wikiann-tiers", 7), ("smoke", 1)]
)
def test_shards_cover_the_grid_exactly_once_and_keep_each_sample_whole(preset, count):
    from dwatt.experiment.grid import shard, work_unit

    specs = grid(**PRESETS[preset])
    shards = [shard(specs, index, count) for index in range(count)]
    ids = [spec.run_id for part in shards for spec in part]
    assert sorted(ids) == sorted(s.run_id for s in specs) and len(ids) == len(set(ids))  # union = grid, no overlap
    assert all(shards) and max(map(len, shards)) - min(map(len, shards)) <= max(len(p) for p in shards) // 2 + 1
    owner = {work_unit(spec): index for index, part in enumerate(shards) for spec in part}
    for index, part in enumerate(shards):  # every fusion and budget of a sample (which share features) in one shard
        assert {owner[work_unit(spec)] for spec in part} == {index}
        assert [s.run_id for s in part] == [s.run_id for s in specs if s in set(part)]  # grid order kept
    assert shard(specs, 0, count) == shards[0]  # deterministic


def test_shard_arguments_are_checked():
    from dwatt.experiment.grid import parse_shard, shard
    from dwatt.experiment.store import shard_results_path

    assert parse_shard("0/4") == (0, 4) and parse_shard("3/4") == (3, 4)
    for bad in ("4/4", "-1/4", "1/0", "1", "a/b", "1/2/3"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)
    specs = grid(fusions=("base", "dwatt"), n_shots=(8,), epochs=(25, 50), trials=2)
    with pytest.raises(ValueError, match="this grid has 2 units of work.*at most 2 shards"):
        shard(specs, 0, 3)
    assert shard_results_path("runs/sweep/results.jsonl", 1, 4).as_posix() == "runs/sweep/results.shard-1-of-4.jsonl"


@pytest.mark.parametrize(
    "options, named",
    [
        ({"fusions": ()}, "--fusions: no value given"),
        ({"learning_rates": ()}, "--learning-rates: no value given"),
        ({"trials": 0}, "--trials must be >= 1, got 0"),
        ({"n_shots": ()}, "--n-shots: no value given"),
    ],
)
def test_an_empty_grid_is_refused(options, named):
    with pytest.raises(ValueError, match=named):
        grid(**{"fusions": ("base",), "n_shots": (1,), "epochs": (1,), "trials": 1} | options)


def test_a_spec_names_its_run_with_the_config_s_own_fields_and_its_trial():
    """RunConfig owns what a run's settings mean and their defaults; a spec adds only the trial (its seed)."""
    from dataclasses import fields

    from dwatt.experiment.grid import SHARED_WITH_CONFIG, RunSpec

    assert {f.name for f in fields(RunSpec)} - set(SHARED_WITH_CONFIG) == {"trial"}
    config = RunSpec("dwatt", "fe", None, 3, 2, "wikitext2", task="mlm", learning_rate=None).run_config("runs")
    assert (config.n_shot, config.seed, config.learning_rate) == (None, 2, RunConfig().learning_rate)


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
    assert batches_of_runs(one_budget, "stacked") == [(True, one_budget)]
    rates = grid(fusions=("dwatt",), n_shots=(8,), epochs=(2,), trials=1, learning_rates=(1e-4, 1e-3))
    assert [s.run_id for s in rates] == [
        "conll2003/default/fe/dwatt/n8/e2/t0/lr0.0001",
        "conll2003/default/fe/dwatt/n8/e2/t0/lr0.001",
    ]
    assert batches_of_runs(rates, "auto") == [(True, rates)]
    with pytest.raises(ValueError, match="--engine: unknown engine 'fast'"):
        batches_of_runs(specs, "fast")

    calls = []
    single = lambda c: calls.append(("trainer", c.epochs)) or {"best_dev_f1": 0.1}
    stacked = lambda cs: calls.append(("budgets", [c.epochs for c in cs])) or [{"best_dev_f1": 0.2} for _ in cs]
    rows = run_sweep(specs, tmp_path / "r.jsonl", execution=executing(single, stacked), progress=False)
    assert calls.count(("budgets", [2, 4])) == 4 and calls.count(("trainer", 2)) == calls.count(("trainer", 4)) == 4
    assert sorted(r["run_id"] for r in rows) == sorted(s.run_id for s in specs)


def test_a_probe_grid_is_a_base_head_on_each_layer_trained_together_per_sample(tiny_backbone):
    specs = grid(
        fusions=("base", "dwatt"),
        n_shots=(8,),
        epochs=(2,),
        trials=2,
        backbones=(str(tiny_backbone),),
        learning_rates=(1e-3, 1e-2),
        probe_layers="all",
    )
    base = [s for s in specs if s.fusion == "base"]
    assert len(base) == 2 * 3 * 2 and {s.layers for s in base} == {"1", "2", "3"}  # trials x layers x rates
    assert base[0].run_id.endswith("/fe/base/n8/e2/t0/lr0.001/L1")
    groups = [group for stacked, group in batches_of_runs(specs, "auto") if stacked]
    assert [len(g) for g in groups] == [6, 2, 6, 2]  # per trial: the probe's 6 heads, DWAtt's 2 rates
    assert [
        s.layers
        for s in grid(
            fusions=("base",), n_shots=(8,), epochs=(2,), trials=1, backbones=(str(tiny_backbone),), probe_layers="1-2"
        )
    ] == ["1", "2"]
    # exactly the layers named: the last only where named, by number, range or step
    for spec, layers in (("every:2", ["2"]), ("every:3", ["3"]), ("2-3", ["2", "3"]), ("1,3", ["1", "3"])):
        assert [
            s.layers
            for s in grid(
                fusions=("base",),
                n_shots=(8,),
                epochs=(2,),
                trials=1,
                backbones=(str(tiny_backbone),),
                probe_layers=spec,
            )
        ] == layers, spec


def test_the_stacked_engine_answers_to_its_old_name_and_an_unknown_engine_is_refused():
    from dwatt.experiment.grid import engine_named
    from dwatt.experiment.store import row_engine

    assert engine_named("budgets") == engine_named("stacked") == "stacked" and engine_named("auto") == "auto"
    assert row_engine({"engine": "budgets"}) == row_engine({"engine": "stacked"}) == "stacked"
    assert row_engine({}) == "trainer"
    with pytest.raises(ValueError, match="--engine: unknown engine 'stacks'; expected one of auto, trainer, stacked"):
        engine_named("stacks")
