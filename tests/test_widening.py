"""Learning-rate grids that grow until they contain their optimum (dwatt.experiment.widening), and the probe that
widens its rates where a layer's best dev rate sits at an edge (dwatt.experiment.probe)."""

import math
import re

import pytest

from dwatt.experiment.widening import RATE_CEILING, Widening, edge_of, next_rate
from dwatt.training import EXECUTION


def test_the_next_rate_repeats_the_grids_own_steps_on_either_side():
    grid = [3e-4, 1e-3, 3e-3, 1e-2]
    assert next_rate(grid, "largest") == 3e-2
    assert next_rate([*grid, 3e-2], "largest") == 1e-1
    assert next_rate(grid, "smallest") == 1e-4
    assert next_rate([1e-4, *grid], "smallest") == 3e-5
    assert next_rate([1e-3, 1e-2], "largest") == 1e-1 and next_rate([1e-3, 1e-2], "smallest") == 1e-4
    assert next_rate([5e-5, 1e-4, 2e-4], "largest") == 4e-4  # a doubling grid keeps doubling
    with pytest.raises(ValueError, match="at least two rates"):
        next_rate([1e-3], "largest")
    with pytest.raises(ValueError, match="an edge is one of"):
        next_rate(grid, "middle")


def test_an_edge_is_named_only_where_there_is_a_grid():
    assert edge_of(1e-2, [1e-3, 1e-2]) == "largest" and edge_of(1e-3, [1e-3, 1e-2]) == "smallest"
    assert edge_of(3e-3, [1e-3, 3e-3, 1e-2]) == "" and edge_of(1e-3, [1e-3]) == ""


def test_a_widening_stops_at_its_count_or_at_the_rates_no_head_trains_with():
    widening = Widening(steps=2)
    assert widening.more([1e-3, 1e-2], {"largest"}) == [1e-1]
    assert widening.more([1e-3, 1e-2, 1e-1], {"largest", "smallest"}) == [1.0, 1e-4]
    assert "largest" not in widening.limits
    assert widening.more([1e-4, 1e-3, 1e-2, 1e-1, 1.0], {"largest", "smallest"}) == [1e-5]
    assert widening.limits == {"largest": "2 rates added past the grid asked for (--widen)"}
    assert widening.more([1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0], {"smallest"}) == []
    assert widening.limits == {"smallest": "2 rates added past the grid asked for (--widen)"}  # largest: inside now
    near = Widening(steps=5)
    assert near.more([0.1, 1.0], {"largest"}) == [] and near.limits["largest"].startswith("the next rate, 10, lies")
    assert next_rate([0.1, 1.0], "largest") > RATE_CEILING
    assert Widening(steps=0).more([1e-3, 1e-2], {"smallest"}) == []


def scored_probe(monkeypatch, peaks: dict[int, float]):
    """The probe's loop over a store whose dev F1 of layer k at rate r is 0.9 + k/100 - |log10 r - log10 peaks[k]| / 10
    (no training): the rates each round asked for are recorded."""
    from dwatt.experiment import probe_runs, store

    rounds = []
    monkeypatch.setattr(
        probe_runs, "run_sweep", lambda specs, *a, **k: rounds.append(sorted({s.learning_rate for s in specs}))
    )

    def finished(self, specs, *args, **kwargs):
        return {
            spec.run_id: {
                "config": {"layers": spec.layers, "learning_rate": spec.learning_rate, "seed": spec.trial},
                "best_dev_f1": 0.9
                + int(spec.layers) / 100
                - 0.1 * abs(math.log10(spec.learning_rate) - math.log10(peaks[int(spec.layers)])),
                "num_dev_sentences": 10,
                "backbone_layers": 3,
            }
            for spec in specs
        }

    monkeypatch.setattr(store.ResultsStore, "finished", finished)
    return rounds


def probe_settings(backbone, tmp_path, **kwargs):
    from dwatt.experiment.probe import ProbeSettings

    return ProbeSettings(
        backbone=str(backbone),
        n_shot=2,
        layers="1-3",
        results=str(tmp_path / "r.jsonl"),
        save_model=False,
        baselines=False,
        **kwargs,
    )


def test_a_probe_widens_past_the_edge_its_layers_choose_until_their_best_rates_are_inside(
    tiny_backbone, tmp_path, monkeypatch
):
    from dwatt.experiment.probe import run_probe, summary_lines, table_lines

    rounds = scored_probe(monkeypatch, {1: 1e-3, 2: 3e-3, 3: 1e-1})
    outcome = run_probe(probe_settings(tiny_backbone, tmp_path), EXECUTION)
    grid = [3e-4, 1e-3, 3e-3, 1e-2]
    assert rounds == [grid, [*grid, 3e-2], [*grid, 3e-2, 1e-1], [*grid, 3e-2, 1e-1, 3e-1]]
    assert outcome.chosen == (3, 1e-1) and outcome.edges() == {}  # 1e-1 is inside the grid it grew to
    assert outcome.widening.added == {"largest": [3e-2, 1e-1, 3e-1], "smallest": []}
    printed = "\n".join(table_lines(outcome) + summary_lines(outcome))
    assert "0.0003    0.001    0.003     0.01     0.03      0.1      0.3" in printed
    assert "rates added where a layer's best dev rate sat at an edge: 0.03, 0.1, 0.3 above" in printed
    assert "still score" not in printed


def test_a_probe_says_where_a_best_rate_stands_at_a_limit(tiny_backbone, tmp_path, monkeypatch):
    from dwatt.experiment.probe import run_probe, summary_lines

    rounds = scored_probe(monkeypatch, {1: 1e-6, 2: 1e-3, 3: 3e-3})
    outcome = run_probe(probe_settings(tiny_backbone, tmp_path, widen=1), EXECUTION)
    assert rounds == [[3e-4, 1e-3, 3e-3, 1e-2], [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]]
    assert outcome.edges() == {"smallest": [1]}
    assert (
        "at the smallest rate tried, 0.0001, layer 1 still scores best: 1 rate added past the grid asked for "
        "(--widen); the optimum may lie beyond it"
    ) in summary_lines(outcome)
    scored_probe(monkeypatch, {1: 1e-6, 2: 1e-3, 3: 3e-3})
    fixed = run_probe(probe_settings(tiny_backbone, tmp_path / "fixed", widen=0), EXECUTION)
    assert fixed.rates == [3e-4, 1e-3, 3e-3, 1e-2] and fixed.widening.limits["smallest"].startswith("0 rates added")
    with pytest.raises(ValueError, match="--widen: a count of rates"):
        probe_settings(tiny_backbone, tmp_path, widen=-1)


def test_a_widened_probe_trains_only_the_added_rates_and_resumes_without_training(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch, capsys
):
    """Through `dwatt probe` on a tiny backbone: whatever edges its layers choose, the rows hold the rates asked for
    and each added rate once per layer, the table shows them, the ensembles are those of the rates asked for, and the
    probe run again trains nothing."""
    import json

    from dwatt.cli import main
    from dwatt.experiment import probe

    results = tmp_path / "r.jsonl"
    argv = ["probe", "--backbone", str(tiny_backbone), "--data-dir", str(tiny_conll), "--n-shot", "2"]
    argv += ["--epochs", "2", "--learning-rates", "5e-3,5e-2", "--widen", "1", "--cache-dtype", "float32", "--test"]
    argv += ["--results", str(results), "--quiet", "--no-save"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    stored = [json.loads(line) for line in results.read_text().splitlines()]
    rows = [row for row in stored if not row["config"]["shuffle_labels"]]  # the probe's control aside
    rates = sorted({row["config"]["learning_rate"] for row in rows})
    assert {5e-3, 5e-2} <= set(rates) <= {5e-4, 5e-3, 5e-2, 5e-1}
    assert len(rows) == 4 * len(rates)  # layers 1-3 and the embedding output
    assert printed.splitlines()[1].split() == ["layer", *(f"{r:g}" for r in rates)]
    for rate, side in ((5e-1, "above"), (5e-4, "below")):
        assert (rate in rates) == (f"{rate:g} {side}" in printed)
    for edge in probe.choose("ner", rows).edges():  # still at an edge after one step: the limit is said
        rate = max(rates) if edge == "largest" else min(rates)
        assert f"at the {edge} rate tried, {rate:g}, layer" in printed
        assert "best: 1 rate added past the grid asked for (--widen); the optimum may lie beyond it" in printed
    ensembles = [(row["config"]["learning_rate"], row["probe_ensembles"]) for row in rows if "probe_ensembles" in row]
    (asked,) = [entries for rate, entries in ensembles if rate in (5e-3, 5e-2)]  # the first run of each group holds
    assert len(ensembles) == 1  # the grid asked for builds them; a widening's added rates build none
    (three,) = [entry for entry in asked if entry["size"] == 3]
    assert (
        f"dev F1 {100 * three['best_f1']:.2f}, test F1 {100 * three['test_scores']['f1']:.2f}"
        + " (of the heads at the rates asked for, trained together)" * (len(rates) > 2)
    ) in printed
    monkeypatch.setattr("dwatt.training.run_together", lambda *a, **k: pytest.fail("trained again"))
    monkeypatch.setattr("dwatt.training.run", lambda *a, **k: pytest.fail("trained again"))
    took = re.compile(r"; took \d+ s\n")  # the time a probe took is its own
    assert main(argv) == 0 and took.sub("", capsys.readouterr().out) == took.sub("", printed)
    assert [json.loads(line) for line in results.read_text().splitlines()] == stored
