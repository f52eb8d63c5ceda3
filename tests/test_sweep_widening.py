"""A sweep's grids widened past the edge dev chose (dwatt.experiment.sweep_widening), on held rows."""

from dataclasses import replace

from dwatt.experiment.grid import grid
from dwatt.experiment.sweep_widening import rate_groups, widened_specs


def held(specs, score):
    return {spec.run_id: {"task": "ner", "config": {}, "best_dev_f1": score(spec)} for spec in specs}


def test_a_group_whose_choice_is_interior_or_unfinished_adds_nothing():
    specs = grid(fusions=("dwatt",), n_shots=(8,), epochs=(1,), trials=2, learning_rates=(1e-4, 1e-3, 1e-2))
    rows = held(specs, lambda spec: -abs(spec.learning_rate - 1e-3))  # 1e-3 best: inside
    assert widened_specs(specs, {1e-4, 1e-3, 1e-2}, rows, steps=3) == ([], {})
    rows = held(specs[1:], lambda spec: spec.learning_rate)  # trial 0 misses a rate; trial 1 would widen
    added, _ = widened_specs(specs, {1e-4, 1e-3, 1e-2}, rows, steps=3)
    assert [(spec.trial, spec.learning_rate) for spec in added] == [(1, 0.1)]


def test_each_probe_layer_and_trial_widens_on_its_own_side_until_its_limit():
    specs = grid(fusions=("base",), n_shots=(8,), epochs=(1,), trials=1, learning_rates=(1e-4, 1e-3, 1e-2))
    specs = [replace(spec, layers=layer) for spec in specs for layer in ("1", "2")]
    assert len(rate_groups(specs)) == 2
    asked = {1e-4, 1e-3, 1e-2}
    # layer 1 likes large rates, layer 2 small ones
    score = lambda spec: spec.learning_rate if spec.layers == "1" else -spec.learning_rate  # noqa: E731
    added, limits = widened_specs(specs, asked, held(specs, score), steps=1)
    assert sorted((spec.layers, spec.learning_rate) for spec in added) == [("1", 0.1), ("2", 1e-5)]
    specs += added
    added, limits = widened_specs(specs, asked, held(specs, score), steps=1)
    assert added == [] and len(limits) == 2
    assert any(
        "at the largest rate tried, 0.1: 1 rate added past the grid asked for (--widen)" in why
        for why in limits.values()
    )
