"""Choices on dev, scored on test (dwatt.experiment.selection), as the fair report writes them: each method's rate and
layer, the verdicts and the answer, the few-shot dev protocol, the probe ensembles."""

import json
import math

import pandas as pd
import pytest

from dwatt.experiment.report import write_report

from .helpers import fair_row, window_grid_rows


def test_a_last_layer_the_same_distance_behind_in_every_trial_has_no_interval_and_lists_nothing_else(tmp_path):
    """The last layer's difference has no spread (one test example in each trial): it is said without a ± 0.00, and
    the other methods' "no interval yet" list is not opened for it alone."""
    rows = []
    for trial in range(2):
        for layer in (1, 2, 3):
            test = {1: 0.5, 2: 0.7 + 0.01 * trial, 3: 0.69 + 0.01 * trial}[layer]
            rows.append(fair_row("base", trial, 1e-3, 0.5 + 0.1 * (layer == 2), test, layer))
        rows.append(fair_row("dwatt", trial, 1e-3, 0.6, 0.7 + 0.03 * trial))
    store = tmp_path / "fair.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in rows))
    write_report([store], tmp_path / "out", title="fair")
    verdict = (tmp_path / "out" / "tables" / "fair_verdicts.md").read_text()
    assert "no interval yet" not in verdict and "±" in verdict  # DWAtt's difference has an interval
    assert "The last layer: -1.00 (the same difference in every trial: no interval)." in verdict


def test_the_fair_report_chooses_each_method_s_rate_and_layer_on_dev_and_reports_their_test_score(tmp_path):
    rows = []
    for trial in range(3):
        for layer in (1, 2, 3):
            for rate in (1e-4, 1e-3):
                # Layer 2 at 1e-3 is best on dev; layer 1 at 1e-4 is best on test (a choice on test would take it).
                dev = 0.5 + 0.1 * (layer == 2) + 0.05 * (rate == 1e-3) + 0.01 * trial
                # the last layer's test F1 drifts by trial, so that its paired difference has a spread
                test = 0.9 if (layer, rate) == (1, 1e-4) else dev - 0.02 + 0.003 * trial * (layer == 3)
                rows.append(fair_row("base", trial, rate, dev, test, layer))
        for rate in (1e-4, 1e-3):
            rows.append(
                fair_row(
                    "dwatt", trial, rate, 0.7 if rate == 1e-4 else 0.6, 0.66 + 0.01 * trial + 0.005 * (trial == 1)
                )
            )
    store = tmp_path / "fair.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = write_report([store], tmp_path / "out", title="fair")
    table = pd.read_csv(tmp_path / "out" / "tables" / "fair_comparison.csv").set_index("method")
    best = table.loc["best single layer"]
    assert best.layers == "2, 2, 2" and best.learning_rates == "0.001, 0.001, 0.001"
    assert best.test_score == pytest.approx(100 * (0.65 + 0.01 - 0.02))  # the dev choice's test F1, mean of 3 trials
    last = table.loc["last layer"]
    assert last.layers == "3, 3, 3" and last.test_score == pytest.approx(100 * (0.55 + 0.01 - 0.02 + 0.003))
    assert table.loc["DWAtt"].learning_rates == "0.0001, 0.0001, 0.0001"
    assert table.loc["DWAtt"].minus_best_layer == pytest.approx(100 * (0.67 - 0.64) + 0.5 / 3)
    assert math.isnan(best.minus_best_layer)
    # selection regret: dev took layer 2 at 1e-3, test would have taken layer 1 at 1e-4 (0.9)
    assert best.regret == pytest.approx(100 * (0.63 + 0.01 - 0.9)) and table.loc["DWAtt"].regret == 0 == last.regret
    regret = (tmp_path / "out" / "tables" / "regret.md").read_text()
    assert regret.splitlines()[:3] == [
        "| backbone | dataset | N | last layer | best single layer | DWAtt |",
        "|---|---|---|---|---|---|",
        "| deep | conll2003 | 32 | +0.00 ± 0.00 | -26.00 ± 2.48 | +0.00 ± 0.00 |",
    ]
    assert regret in report.read_text() and "Dev set: a dev set of 200 sentences." in report.read_text()
    text = report.read_text()
    assert (
        "**deep, conll2003, FE, 25 epochs: test F1 of the run chosen on dev**\n\nLearning rates tried: 0.0001, 0.001.\n"
        in text
    )
    verdict = (tmp_path / "out" / "tables" / "fair_verdicts.md").read_text()
    assert verdict in text and verdict.startswith(
        "- **deep**, conll2003, N = 32 (3 trials): the best single layer 64.00 (layer 2, 2, 2)."
    )
    assert (
        "Fusions that beat it (Holm-corrected p < 0.05): DWAtt +3.17 ± 0.72; within ±1 of it (two one-sided tests, "
        "Holm-corrected): none; neither shown: none; that trail it: none."
    ) in verdict
    assert verdict.rstrip().endswith(
        "The last layer: -9.70 ± 0.75. Chosen at the largest learning rate tried in most "
        "trials (the optimum may lie beyond it): last layer, best single layer. Chosen at the smallest learning rate "
        "tried in most trials (the optimum may lie beyond it): DWAtt."
    )
    assert list(table.rate_edge) == ["largest", "largest", "smallest"]  # of 1e-4 and 1e-3: 1e-3, 1e-3, 1e-4
    answer = (tmp_path / "out" / "tables" / "fair_answer.md").read_text().splitlines()
    assert answer[:3] == [
        "| setting | best single layer | last layer | DWAtt |",
        "|---|---|---|---|",
        "| deep, N = 32 (3 trials) | 64.00 | -9.70 ± 0.75 ▼ ⇡ | +3.17 ± 0.72 ▲ ⇣ |",
    ]
    assert answer[3] == "| every trial: trials ahead (sign test, secondary) |  | 0 of 3 ahead | 3 of 3 ahead |"
    assert answer[5].startswith(
        "CoNLL-03 test F1: the best single layer's, and each method's difference from it in F1 "
        "(mean ± 95% CI over trials, paired), each method at its own learning rate chosen on a "
        "dev set of 200 sentences. ▲/▼: ahead/behind after Holm's correction (p < 0.05) over the 1 "
    )
    assert "dev F1" not in (tmp_path / "out" / "tables" / "fair_comparison.md").read_text()  # test scores only
    assert (tmp_path / "out" / "figures" / "probe.png").exists() and "fig2_f1_vs_n" not in text
    probe = pd.read_csv(tmp_path / "out" / "tables" / "probe.csv")
    # layer 1: 1e-3 wins on dev (its test F1, 0.53-0.55), not 1e-4 (0.9 on test)
    assert list(probe.layer) == [1, 2, 3] and probe.test_score.iloc[0] == pytest.approx(100 * (0.55 + 0.01 - 0.02))


def test_a_fusion_beats_or_trails_the_best_layer_only_where_the_interval_excludes_zero():
    from dwatt.experiment.selection import verdict

    assert verdict(2.0, 1.5) == "beats" and verdict(-2.0, 1.5) == "trails"
    assert verdict(1.0, 1.5) == verdict(-1.0, 1.5) == "level" and verdict(5.0, math.nan) == "no interval"
    # the same difference in every trial (two trials that agree to 46 of 1200 texts): a CI of width 0, no evidence
    assert verdict(3.83, 9e-14) == verdict(-3.83, 0.0) == "no interval" and verdict(0.0, 0.0) == "level"


def test_a_probe_that_leaves_out_the_last_layer_has_no_last_layer_method():
    from dwatt.experiment.methods import with_methods
    from dwatt.experiment.selection import chosen_on_dev
    from dwatt.experiment.summaries import runs_frame

    rows = [fair_row("base", 0, rate, 0.5 + 0.1 * layer, 0.5, layer) for layer in (1, 2) for rate in (1e-4, 1e-3)]
    picks = chosen_on_dev(with_methods(runs_frame(rows)))  # the backbone has 3 layers; layer 2 is not its last
    assert list(picks.method) == ["best single layer"] and picks.layer.iloc[0] == 2
    rows.append(fair_row("base", 0, 1e-3, 0.3, 0.4, 3))
    picks = chosen_on_dev(with_methods(runs_frame(rows)))
    assert list(picks.method) == ["last layer", "best single layer"] and picks.layer.iloc[0] == 3


def test_the_fair_report_of_text_classification_chooses_on_dev_accuracy_and_reports_test_accuracy(tmp_path):
    def cls_row(fusion, trial, rate, dev, test, layer=None):
        return {
            "task": "cls",
            "seed": trial,
            "best_dev_accuracy": dev,
            "test_scores": {"accuracy": test, "macro_f1": test},
            "backbone_layers": 2,
            "num_dev_examples": 800,
            "config": {
                "backbone": "/m/enc",
                "fusion": fusion,
                "mode": "fe",
                "dataset": "ag_news",
                "n_shot": 16,
                "epochs": 20,
                "task": "cls",
                "learning_rate": rate,
                "layers": str(layer) if layer is not None else "all",
            },
        }

    rows = []
    for trial in range(3):
        for rate in (1e-3, 1e-2):
            for layer in (1, 2):  # layer 1 at 1e-2 is best on dev
                rows.append(
                    cls_row(
                        "base", trial, rate, 0.5 + 0.2 * (layer == 1) + 0.1 * (rate == 1e-2), 0.7 + 0.01 * trial, layer
                    )
                )
            rows.append(
                cls_row("dwatt", trial, rate, 0.6 + 0.1 * (rate == 1e-3), 0.75 + 0.01 * trial + 0.005 * (trial == 1))
            )
    store = tmp_path / "fair.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = write_report([store], tmp_path / "out", title="fair").read_text()
    table = pd.read_csv(tmp_path / "out" / "tables" / "fair_comparison.csv").set_index("method")
    assert set(table.metric) == {"accuracy"} and table.loc["best single layer"].layers == "1, 1, 1"
    assert table.loc["DWAtt"].learning_rates == "0.001, 0.001, 0.001"
    assert table.loc["DWAtt"].minus_best_layer == pytest.approx(5.0 + 0.5 / 3)
    assert "| N | method | test accuracy |" in report and "test accuracy of the run chosen on dev" in report
    answer = (tmp_path / "out" / "tables" / "fair_answer.md").read_text()
    assert "| enc, N = 16 (3 trials) | 71.00 |" in answer and "+5.17 ± 0.72 ▲" in answer
    assert (
        "AG News test accuracy: the best single layer's, and each method's difference from it in accuracy points"
        in answer
    )
    assert "chosen on a dev set of 800 texts" in answer


def test_the_fair_report_makes_every_choice_again_on_each_trial_s_few_shot_dev_sample(tmp_path):
    rows = []
    for trial in range(3):
        for layer in (1, 2):
            for rate in (1e-4, 1e-3):
                # On the 1000 dev sentences layer 2 at 1e-3 wins; on the small sample, layer 1 at 1e-4 (its test: 0.5)
                row = fair_row(
                    "base", trial, rate, 0.5 + 0.1 * (layer == 2) + 0.05 * (rate == 1e-3), 0.6 + 0.01 * trial, layer
                )
                small = 0.9 if (layer, rate) == (1, 1e-4) else 0.4
                row["few_shot_dev"] = {
                    "sentences": 128,
                    "best_f1": small,
                    "best_epoch": 3.0,
                    "test_scores": {"f1": 0.5},
                }
                rows.append(row)
    store = tmp_path / "fair.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = write_report([store], tmp_path / "out", title="fair").read_text()
    tables = tmp_path / "out" / "tables"
    small = (tables / "fair_comparison_few_shot_dev.md").read_text()
    assert "| 32 | best single layer | 50.00 ± 0.00 |" in small and "| 1, 1, 1 |" in small
    assert "| 32 | best single layer | 61.00 ± 2.48 |" in (tables / "fair_comparison.md").read_text()
    # regret on the sample: its choice's test 0.5 against the best test among the candidates' sample choices, 0.5
    assert "+0.00 ± 0.00" in (tables / "regret_few_shot_dev.md").read_text()
    assert "## Chosen as a few-shot user chooses" in report and "a dev set of 128 sentences" in report


def test_probe_ensembles_are_methods_of_the_fair_report_with_their_layers_and_the_probe_s_rates(tmp_path):
    """A probe group's ensembles (on its first run's row) become one method per size, paired by trial with the best
    single layer; their layers are listed per trial (chosen on dev, or on the few-shot sample in that table), their
    rates are each layer's own, and they count as one planned run per trial in the coverage."""
    rows = []
    for trial in range(3):
        group = [
            fair_row("base", trial, rate, 0.5 + 0.1 * layer, 0.6, layer)
            for layer in (1, 2, 3)
            for rate in (1e-4, 1e-3)
        ]
        members = lambda layers: [{"layer": layer, "learning_rate": 1e-3, "epoch": 2.0, "f1": 0.5} for layer in layers]
        group[0]["probe_ensembles"] = [
            {
                "size": 3,
                "members": members([3, 2, 1]),
                "best_f1": 0.7,
                "test_scores": {"f1": 0.63 + 0.01 * trial},
                "candidates": {"layers": [1, 2, 3], "learning_rates": [1e-4, 1e-3]},
                "few_shot_dev": {
                    "sentences": 128,
                    "seed": trial,
                    "members": members([1, 3, 2]),
                    "best_f1": 0.8,
                    "test_scores": {"f1": 0.55},
                },
            }
        ]
        for row in group:
            row["few_shot_dev"] = {"sentences": 128, "best_f1": 0.4, "best_epoch": 3.0, "test_scores": {"f1": 0.6}}
        rows += group
    # the grid's store without the ensembles, and a probe trained again for them in its own store (the same runs)
    store, again = tmp_path / "fair.jsonl", tmp_path / "fair.ensembles.jsonl"
    store.write_text(
        "".join(json.dumps({k: v for k, v in row.items() if k != "probe_ensembles"}) + "\n" for row in rows)
    )
    again.write_text("".join(json.dumps(row) + "\n" for row in rows if "probe_ensembles" in row))
    write_report([store, again], tmp_path / "out", title="fair")
    tables = tmp_path / "out" / "tables"
    table = pd.read_csv(tables / "fair_comparison.csv").set_index("method")
    ensemble = table.loc["top-3 layers averaged"]
    assert ensemble.test_score == pytest.approx(64.0) and ensemble.minus_best_layer == pytest.approx(4.0)
    assert ensemble.layers == "3,2,1; 3,2,1; 3,2,1" and ensemble.learning_rates == "each layer's own"
    assert ensemble.learning_rates_tried == "0.0001, 0.001" and pd.isna(ensemble.regret)
    assert "| 32 | top-3 layers averaged | 55.00 ± 0.00 |" in (tables / "fair_comparison_few_shot_dev.md").read_text()
    assert "| 1,3,2; 1,3,2; 1,3,2 |" in (tables / "fair_comparison_few_shot_dev.md").read_text()
    assert (
        "Fusions or probe ensembles that beat it (Holm-corrected p < 0.05): top-3 layers averaged +4.00"
        in (tables / "fair_verdicts.md").read_text()
    )
    answer = (tables / "fair_answer.md").read_text().splitlines()
    assert answer[0] == "| setting | best single layer | last layer | top-3 |" and answer[2].endswith(
        "| +4.00 ± 2.48 ▲ |"
    )
    coverage = (tables / "coverage.md").read_text()
    assert "| top-3 layers averaged |" in coverage and "| 3/3 | 3/3 |" in coverage
    # a run trained again with another result is still refused, ensembles or not
    changed = [dict(row, test_scores={"f1": 0.1}) for row in rows if "probe_ensembles" in row]
    again.write_text("".join(json.dumps(row) + "\n" for row in changed))
    with pytest.raises(ValueError, match="appears twice with different results"):
        write_report([store, again], tmp_path / "out2", title="fair")


def test_window_around_clips_to_the_backbone_and_is_none_where_it_would_be_every_layer():
    from dwatt.experiment.selection import window_around

    assert window_around(11, 30) == "9-13" and window_around(2, 30) == "1-4" and window_around(29, 30) == "27-30"
    assert window_around(3, 6) is None and window_around(4, 6) == "2-6" and window_around(3, 7) == "1-5"
    # alone: the window's layers without the last, every layer only where it spans them all
    assert window_around(3, 6, alone=True) == "only:1-5" and window_around(11, 30, alone=True) == "only:9-13"
    assert window_around(3, 5, alone=True) is None


def test_a_window_fusion_is_chosen_around_the_layer_each_dev_set_chose(tmp_path):
    from dwatt.experiment.methods import window_methods
    from dwatt.experiment.selection import fair_comparison
    from dwatt.experiment.summaries import runs_frame

    frame = runs_frame(window_grid_rows())
    method, alone = window_methods()["scalar_mix", False], window_methods()["scalar_mix", True]
    on_dev = fair_comparison(frame).set_index("method")
    on_sample = fair_comparison(frame, few_shot_dev=True).set_index("method")
    # dev: layer 6, the window 4-8, its better rate on dev (test 0.75); the sample: layer 3, the window 1-5 (0.6)
    assert (
        on_dev.loc[method, "test_score"] == pytest.approx(75)
        and on_dev.loc[method, "learning_rates"] == "0.001, 0.001"
    )
    assert on_sample.loc[method, "test_score"] == pytest.approx(60)
    assert on_dev.loc[method, "regret"] == pytest.approx(0) and "ScalarMix" not in on_dev.index  # no run of all layers
    assert on_dev.loc[method, "minus_best_layer"] == pytest.approx(25)
    # the window alone (only:4-8) is a method of its own, chosen around the same layer
    assert on_dev.loc[alone, "test_score"] == pytest.approx(80) and on_dev.loc[alone, "layers"] == "only:4-8, only:4-8"
    assert method == "ScalarMix, best layer ±2 and the last" and alone == "ScalarMix, best layer ±2"
    store = tmp_path / "fair.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in window_grid_rows()))
    write_report([store], tmp_path / "out", title="fair")
    coverage = (tmp_path / "out" / "tables" / "coverage.md").read_text()
    assert (
        f"| Base (probe) | {method} | {alone} |" in coverage
        and "| deep | conll2003 | 32 | 2/2 | 2/2 | 2/2 |" in coverage
    )
    table = (tmp_path / "out" / "tables" / "fair_comparison.md").read_text()
    assert f"| 32 | {method} | 75.00 ± 0.00 | +25.00 ± 0.00 | 0.001, 0.001 | 4-8, 4-8 | 2 |" in table


def test_the_second_stage_of_a_window_grid_follows_each_trial_s_probe():
    from dwatt.experiment.grid import grid
    from dwatt.experiment.selection import around_chosen_layers
    from dwatt.experiment.summaries import runs_frame

    frame = runs_frame(window_grid_rows())
    specs = grid(
        fusions=("scalar_mix", "dwatt"),
        n_shots=(32,),
        epochs=(25,),
        trials=2,
        backbones=("/m/deep",),
        learning_rates=(1e-4, 1e-3),
    )
    windows = around_chosen_layers(specs, frame)
    assert {(spec.trial, spec.fusion, spec.layers) for spec in windows} == {
        (trial, fusion, "4-8") for trial in (0, 1) for fusion in ("scalar_mix", "dwatt")
    }
    assert len(around_chosen_layers(specs, frame, few_shot_dev=True)) == 2 * len(specs)
    assert all(spec.run_id.endswith("/L4-8") for spec in windows)
    assert {spec.layers for spec in around_chosen_layers(specs, frame, alone=True)} == {"only:4-8"}
    with pytest.raises(ValueError, match=r"no probe .* for conll2003/deep/fe/scalar_mix/n32/e25/t2"):
        around_chosen_layers(
            grid(fusions=("scalar_mix",), n_shots=(32,), epochs=(25,), trials=3, backbones=("/m/deep",)), frame
        )
    with pytest.raises(ValueError, match="fusions that mix layers .*; not base_plus_n"):
        around_chosen_layers(
            grid(fusions=("base_plus_n",), n_shots=(32,), epochs=(25,), trials=1, backbones=("/m/deep",)), frame
        )


def test_a_choice_at_either_edge_of_its_grid_in_most_trials_is_flagged():
    from dwatt.experiment.selection import rate_edge

    tried = [[5e-5, 3e-4, 1e-3]] * 3
    assert rate_edge([1e-3, 1e-3, 3e-4], tried) == "largest" and rate_edge([5e-5, 5e-5, 1e-3], tried) == "smallest"
    assert rate_edge([1e-3, 3e-4, 5e-5], tried) == "" and rate_edge([1e-3], [[1e-3]]) == ""
    # a grid widened in some trials only: each choice is judged by its own trial's rates, not by the rates of all
    widened = [[1.5e-5, 5e-5, 3e-4], [1.5e-5, 5e-5, 3e-4], [5e-5, 3e-4]]
    assert rate_edge([5e-5, 5e-5, 5e-5], widened) == "" and rate_edge([1.5e-5, 5e-5, 5e-5], widened) == "smallest"


def test_a_probe_ensemble_built_on_part_of_the_grid_is_not_the_method():
    """A group that trained part of a trial's probe grid (a widening round's added rate, in sweeps from before they
    stopped building ensembles there) ranked its own heads alone: its "top-k" is left out, whatever its dev score, and
    the ensemble of the group that trained the grid stands (one per trial in the coverage)."""
    from dwatt.experiment.methods import with_methods
    from dwatt.experiment.selection import chosen_on_dev
    from dwatt.experiment.summaries import runs_frame

    def ensemble(layers, dev, test):
        members = [{"layer": layer, "learning_rate": 1e-3, "epoch": 2.0, "f1": 0.5} for layer in layers]
        return [{"size": 3, "members": members, "best_f1": dev, "test_scores": {"f1": test}}]

    rows = []
    for trial in range(2):
        grid_rows = [
            fair_row("base", trial, rate, 0.5 + 0.1 * layer, 0.6, layer)
            for layer in (1, 2, 3)
            for rate in (1e-4, 1e-3)
        ]
        for row in grid_rows:
            row["trained_together_runs"] = len(grid_rows)
        grid_rows[0]["probe_ensembles"] = ensemble([3, 2, 1], 0.7, 0.65)
        widened = [
            fair_row("base", trial, 1e-2, 0.55, 0.6, layer) | {"trained_together_runs": 3} for layer in (1, 2, 3)
        ]
        widened[0]["probe_ensembles"] = ensemble([1, 2, 3], 0.95, 0.2)  # ahead on dev: chosen, were it a candidate
        rows += grid_rows + widened
    chosen = chosen_on_dev(with_methods(runs_frame(rows)))
    top3 = chosen[chosen.method == "top-3 layers averaged"]
    assert list(top3.test_score) == [65.0, 65.0] and list(top3.members) == ["3,2,1", "3,2,1"]
