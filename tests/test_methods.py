"""The fair comparison's methods (dwatt.experiment.methods): named from the fusions' specs, in their table order, and
each stored run given its method."""

from dwatt.experiment.methods import (
    BEST_LAYER,
    FLOOR_METHODS,
    LAST_LAYER,
    fusion_methods,
    method_of_fusion,
    methods,
    window_methods,
    with_methods,
)
from dwatt.experiment.summaries import PROBE_FUSION, runs_frame
from specs_dwatt import FUSION_SPECS, table_order

from .helpers import window_grid_rows


def test_fusions_are_methods_in_their_spec_s_table_order_and_name():
    fusions = list(fusion_methods())
    assert fusions == [name for name in table_order() if name != PROBE_FUSION]
    assert set(fusions) == set(FUSION_SPECS) - {PROBE_FUSION}
    every = methods()
    assert every[:2] == (LAST_LAYER, BEST_LAYER) and every[-len(FLOOR_METHODS) :] == tuple(FLOOR_METHODS.values())
    assert len(set(every)) == len(every)  # no two methods share a name
    # a window is run only with the fusions that mix the layers they are given, alone and with the last layer
    assert {fusion for fusion, _ in window_methods()} == {name for name in fusions if FUSION_SPECS[name].mixes_layers}
    assert method_of_fusion()[PROBE_FUSION] == "Base (probe)"


def test_each_run_gets_its_method_and_its_task_s_scores():
    runs = with_methods(runs_frame(window_grid_rows()))
    named = fusion_methods()["scalar_mix"]
    assert set(runs.method) == {
        method_of_fusion()[PROBE_FUSION],
        window_methods()["scalar_mix", False],
        window_methods()["scalar_mix", True],
    }
    alone = runs[runs.fused_layers.str.startswith("only:", na=False)]
    assert set(alone.method) == {f"{named}, best layer ±2"}
    assert (runs.metric == "F1").all() and runs.dev_score.notna().all() and runs.test_score.notna().all()
