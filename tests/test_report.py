"""Reports: mean ± t-interval tables, resource tiers, the paper comparison, and every figure from results rows."""

import json
import math

import pandas as pd
import pytest

from dwatt.experiment.figures import FIGURES, draw_all
from dwatt.experiment.report import confidence_interval, load_rows, runs_frame, tier, write_report

T_975_2_DOF = 4.302652729911275  # Student's t quantile, 0.975, 2 degrees of freedom (from tables)


def ner_row(fusion, n, epochs, trial, f1, dataset="conll2003", mode="fe", backbone="/m/small", pool=14041):
    layers = [1, 2, 3]
    weights = {"layers": layers, "by_type": {"PER": [0.2, 0.3, 0.5], "O": [0.6, 0.3, 0.1]}, "positions": {"PER": 3, "O": 9}}
    return {
        "task": "ner",
        "config": {"backbone": backbone, "fusion": fusion, "mode": mode, "dataset": dataset, "n_shot": n, "epochs": epochs},
        "seed": trial,
        "best_dev_f1": f1,
        "final_dev_f1": f1,
        "best_epoch": epochs,
        "train_pool_size": pool,
        "dev_curve": [{"epoch": e, "step": 2 * e, "f1": f1 * e / epochs} for e in range(1, epochs + 1)],
        **({"dev_layer_weights": weights} if fusion == "dwatt" else {}),
    }


def mlm_row(fusion, ppl):
    return {"task": "mlm", "config": {"backbone": "/m/small", "fusion": fusion, "mode": "ft", "epochs": 1, "task": "mlm"},
            "seed": 0, "best_dev_perplexity": ppl + 1, "test_perplexity": ppl}


def every_experiment() -> list[dict]:
    rows = []
    for trial in range(3):
        for fusion, gain in (("base", 0.0), ("base_plus_n", 0.1), ("concat", 0.2), ("dwatt", 0.3)):
            for n in (8, 128):
                for epochs in (2, 4):
                    rows.append(ner_row(fusion, n, epochs, trial, 0.1 + gain + 0.01 * trial + n / 1000))
                rows.append(ner_row(fusion, n, 4, trial, 0.5 + gain, mode="ft"))
                rows.append(ner_row(fusion, n, 4, trial, 0.2 + gain, backbone="/m/large"))
            for language, pool in (("en", 20000), ("af", 5000), ("sw", 1000), ("yo", 100)):
                rows.append(ner_row(fusion, 100, 25, trial, gain + pool / 1e5, dataset=f"wikiann:{language}", pool=pool))
    rows += [cls_row(f, n, trial, 0.6 + gain + n / 1000) for trial in range(3) for f, gain in (("base", 0.0), ("dwatt", 0.1))
             for n in (4, 16)]
    rows += [ner_row(f, n, 25, trial, 0.3 + gain, backbone="/m/deep") | {"num_dev_sentences": 1000}  # the depth grid
             for trial in range(2) for f, gain in (("base", 0.0), ("dwatt", 0.2)) for n in (8, 32)]
    return rows + [mlm_row(f, p) for f, p in (("base", 3.0), ("dwatt", 2.5), ("concat", 4.0), ("base_plus_n", 3.5))]


def cls_row(fusion, n, trial, accuracy):
    return {"task": "cls", "seed": trial, "pooling": "mean", "best_dev_accuracy": accuracy, "best_dev_macro_f1": accuracy - 0.01,
            "best_epoch": 5, "config": {"backbone": "/m/small", "fusion": fusion, "mode": "fe", "dataset": "ag_news",
                                        "n_shot": n, "epochs": 5, "task": "cls", "seed": trial}}


def test_a_side_experiment_on_a_dev_subset_stays_out_of_the_grid_figures_and_tables(tmp_path):
    grid = [ner_row(f, n, 4, t, 0.1 + 0.2 * (f == "dwatt") + n / 1000) for f in ("base_plus_n", "dwatt") for n in (8, 32, 128) for t in range(2)]
    side = [ner_row(f, n, 8, 0, 0.9, mode=mode) | {"num_dev_sentences": 500} for f in ("base_plus_n", "dwatt") for n in (8, 128) for mode in ("fe", "ft")]
    frame = runs_frame(grid + side)
    from dwatt.experiment.report import conll_fe_grid, headline_budget, paper_comparison

    assert len(conll_fe_grid(frame)) == len(grid) and headline_budget(conll_fe_grid(frame)) == 4
    assert "| +20.00 ± 0.00 | small, N=128, 4 epochs, 2 trials |" in paper_comparison(frame)  # not the side's 0.00
    assert headline_budget(runs_frame([ner_row("dwatt", n, e, 0, 0.5) for n, e in ((8, 4), (32, 4), (8, 9))])) == 4
    store = tmp_path / "results.jsonl"
    store.write_text("\n".join(json.dumps(r) for r in grid + side) + "\n")
    text = write_report([store], tmp_path / "out").read_text()
    assert "| N=8, 8 epochs, dev 500 |" in text and "| N=128, 8 epochs, dev 500 |" in text
    summary = pd.read_csv(tmp_path / "out" / "tables" / "ner_summary.csv")
    assert set(summary[summary.epochs == 8].trials) == {1}  # never pooled with the grid's rows


def test_the_paper_comparison_pairs_trials_at_the_largest_n_and_budget_and_at_figure_2s_budget():
    gains = {0: 0.10, 1: 0.12, 2: 0.14}  # DWAtt − Base+n per trial at N=128, 9 epochs: mean 12, paired sd 2
    rows = [ner_row(f, n, 4, t, 0.3 + 0.1 * t + 0.05 * (f == "dwatt")) for f in ("base_plus_n", "dwatt") for n in (8, 128) for t in range(3)]
    rows += [ner_row(f, 128, 9, t, 0.2 * t + gains[t] * (f == "dwatt")) for f in ("base_plus_n", "dwatt") for t in range(3)]
    rows += [ner_row("dwatt", 128, 9, 3, 0.9)]  # a trial without its Base+n run has no pair
    from dwatt.experiment.report import paper_comparison

    comparison = paper_comparison(runs_frame(rows))
    assert "| +5.00 ± 0.00 | small, N=128, 4 epochs, 3 trials |" in comparison  # Figure 2's budget (most N values)
    ci = T_975_2_DOF * 2 / math.sqrt(3)  # trial-to-trial spread of 20 points cancels in the pairs
    assert f"| +12.00 ± {ci:.2f} | small, N=128, 9 epochs, 3 trials |" in comparison
    assert comparison.index("4 epochs, 3 trials") < comparison.index("9 epochs, 3 trials")
    unpaired = [ner_row("dwatt", 128, 4, 0, 0.5), ner_row("base_plus_n", 128, 4, 1, 0.3)]
    assert "CoNLL-03" not in paper_comparison(runs_frame(unpaired))  # no trial has both: no gain to state


def test_budgets_run_at_the_largest_n_only_are_drawn_against_the_budget():
    from dwatt.experiment.figures import figure_budgets

    rows = [ner_row(f, n, 4, t, 0.3) for f in ("concat", "dwatt") for n in (8, 32, 128) for t in range(2)]
    rows += [ner_row(f, 128, e, t, 0.4) for f in ("concat", "dwatt") for e in (9, 12) for t in range(2)]
    (axis,) = figure_budgets(runs_frame(rows)).axes
    assert axis.get_title() == "N=128" and axis.get_xlabel() == "epoch budget"
    assert [list(bars.lines[0].get_xdata()) for bars in axis.containers] == [[4, 9, 12], [4, 9, 12]]


def test_interval_is_the_student_t_half_width():
    assert confidence_interval([0.1, 0.2, 0.3]) == pytest.approx(T_975_2_DOF * 0.1 / math.sqrt(3))
    assert math.isnan(confidence_interval([0.4])) and math.isnan(confidence_interval([]))


def test_tiers_follow_the_training_split_size():
    assert [tier(n) for n in (20000, 10000, 5000, 1000, 100)] == ["high", "medium", "medium", "low", "very low"]


def test_report_writes_every_table_and_figure(tmp_path):
    store = tmp_path / "results.jsonl"
    store.write_text("\n".join(json.dumps(r) for r in every_experiment()) + "\n")
    report = write_report([store], tmp_path / "out", title="All")
    text = report.read_text()
    for name in FIGURES:
        assert (tmp_path / "out" / "figures" / f"{name}.png").stat().st_size > 1000, name
        assert (tmp_path / "out" / "figures" / f"{name}.svg").is_file() and f"figures/{name}.png" in text
    assert "Not drawn" not in text
    summary = pd.read_csv(tmp_path / "out" / "tables" / "ner_summary.csv")
    cell = summary[(summary.dataset == "conll2003") & (summary.backbone == "small") & (summary["mode"] == "fe")
                   & (summary.fusion == "dwatt") & (summary.n_shot == 128) & (summary.epochs == 4)].iloc[0]
    assert cell["mean"] == pytest.approx(100 * (0.4 + 0.01 + 0.128)) and cell.trials == 3
    assert cell.ci95 == pytest.approx(T_975_2_DOF * 1.0 / math.sqrt(3))  # trials 1 point apart: sd 1
    assert "| N=8, 2 epochs |" in text and text.index("N=8, 2 epochs") < text.index("N=128, 2 epochs")
    tiers = pd.read_csv(tmp_path / "out" / "tables" / "wikiann_tiers.csv")
    assert set(tiers.tier) == {"high", "medium", "low", "very low"} and set(tiers.languages) == {1}
    comparison = (tmp_path / "out" / "tables" / "paper_comparison.md").read_text()
    assert "| +5.28 (N=128, 100 epochs) | +20.00 ± 0.00 | small, N=128, 4 epochs, 3 trials |" in comparison  # 0.3 vs 0.1
    assert "| WikiText-2 test perplexity, DWAtt | 2.91 | 2.50 |" in comparison
    mlm = pd.read_csv(tmp_path / "out" / "tables" / "mlm_summary.csv")
    assert mlm.set_index("fusion").mean_test_ppl.to_dict() == {"base": 3.0, "base_plus_n": 3.5, "concat": 4.0, "dwatt": 2.5}


def test_report_says_what_it_could_not_draw(tmp_path):
    store = tmp_path / "results.jsonl"
    store.write_text(json.dumps(mlm_row("dwatt", 2.0)) + "\n")
    text = write_report([store], tmp_path / "out").read_text()
    assert "Not drawn (no runs of that experiment in these results): fig2_f1_vs_n" in text
    assert "| small | ft | dwatt | 1 | 2.0 | 3.0 |" in text


def test_bad_results_rows_are_named_by_file_and_line(tmp_path):
    store = tmp_path / "results.jsonl"
    store.write_text(json.dumps(mlm_row("dwatt", 2.0)) + "\n{broken\n")
    with pytest.raises(ValueError, match=r"results\.jsonl:2: not a JSON results row"):
        load_rows([store])
    store.write_text('{"run_id": "x"}\n')
    with pytest.raises(ValueError, match=r"results\.jsonl:1: a results row needs a 'config'"):
        load_rows([store])
    assert runs_frame([]).empty


def test_depth_comparison_tables_the_gain_of_fusion_over_the_last_layer_per_backbone_and_draws_where_dwatt_looks(tmp_path):
    rows = []
    for trial in range(3):
        for backbone, depth, lift in (("/m/deep-llm", 5, 0.3), ("/m/shallow", 3, 0.1)):
            weights = {"layers": list(range(1, depth + 1)), "by_type": {"PER": [1 / depth] * depth, "O": [1 / depth] * depth},
                       "positions": {"PER": 3, "O": 9}}
            for fusion, gain in (("base", 0.0), ("concat", lift / 2), ("dwatt", lift)):
                for n in (8, 32):
                    row = ner_row(fusion, n, 25, trial, 0.2 + gain + 0.01 * trial, backbone=backbone) | {"num_dev_sentences": 1000}
                    if fusion == "dwatt":
                        row["dev_layer_weights"] = weights
                    rows.append(row)
            rows += [cls_row(f, 4, trial, 0.5 + g + 0.02 * trial) | {"config": cls_row(f, 4, trial, 0)["config"] | {"backbone": backbone}}
                     for f, g in (("base", 0.0), ("dwatt", lift))]
    path = tmp_path / "depth.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    report = write_report([path], tmp_path / "report")
    table = (tmp_path / "report" / "tables" / "fusion_gains.md").read_text().splitlines()
    assert table[0] == "| backbone (layers) | task, N | Base | Concat | DWAtt | DWAtt − Base | DWAtt − Concat |"
    deep = [line for line in table if line.startswith("| deep-llm (5)")]
    assert len(deep) == 3 and deep[0].startswith("| deep-llm (5) | CoNLL-03 F1, N=8 (3 trials) | 21.00 | 36.00 | 51.00 | +30.00 ± 0.00 | +15.00 ± 0.00 |")
    assert "AG News acc. (mean), N=4 (3 trials)" in deep[2] and "+30.00 ± 0.00" in deep[2]
    assert table.index(deep[0]) < min(table.index(line) for line in table if line.startswith("| shallow (3)"))  # deepest first
    assert "layer_weights_by_depth" in report.read_text() and (tmp_path / "report" / "figures" / "layer_weights_by_depth.png").exists()


def test_a_backbone_run_only_in_the_depth_grid_stays_out_of_the_paper_s_figures_and_comparison(tmp_path):
    grid = [ner_row(f, n, 4, t, 0.1 + 0.2 * (f == "dwatt")) for f in ("concat", "dwatt") for n in (8, 128) for t in range(2)]
    depth = [ner_row(f, n, 25, 0, 0.3 + 0.1 * (f == "dwatt"), backbone="/m/llm") | {"num_dev_sentences": 1000}
             for f in ("concat", "dwatt") for n in (8, 128)]
    frame = runs_frame(grid + depth)
    from dwatt.experiment.report import conll_fe_grid, fusion_gains, paper_comparison

    assert set(conll_fe_grid(frame).backbone) == {"small"}
    assert "llm" not in paper_comparison(frame)
    assert FIGURES["fig7_base_vs_large"](frame) is None  # one paper-protocol grid: nothing to set beside it
    assert "| llm (3) | CoNLL-03 F1, N=128 (1 trial) |" in fusion_gains(frame)
    stale = tmp_path / "figures" / "fig7_base_vs_large.png"  # drawn from earlier results
    stale.parent.mkdir()
    stale.write_bytes(b"old")
    drawn, skipped = draw_all(frame, tmp_path / "figures")
    assert "fig7_base_vs_large" in skipped and not stale.exists() and (tmp_path / "figures" / "fig2_f1_vs_n.png").exists()


def test_training_modes_side_by_side_pair_the_trials_every_mode_has(tmp_path):
    f1 = {"fe": 0.3, "lora": 0.4, "ft": 0.6}
    rows = [ner_row("dwatt", 8, 50, t, f1[m] + 0.1 * t, mode=m) | {"num_dev_sentences": 500}
            for m, trials in (("fe", 3), ("lora", 1), ("ft", 2)) for t in range(trials)]
    rows += [ner_row("base", 8, 50, t, 0.1, mode=m) | {"num_dev_sentences": 500} for m in ("fe", "ft") for t in range(2)]
    rows += [ner_row("dwatt", 8, 25, 0, 0.5)]  # FE alone at another budget: nothing to compare
    from dwatt.experiment.report import mode_comparison

    table = mode_comparison(runs_frame(rows)).splitlines()
    assert table[0] == "**CoNLL-03 dev F1 by training mode, small, 50 epochs, dev 500 sentences**"
    assert "| N | fusion | FE | LoRA | FT |" in table
    assert "| 8 | DWAtt | 30.00 (1) | 40.00 (1) | 60.00 (1) |" in table  # trial 0 alone: the one LoRA has
    assert not any(line.startswith("| 8 | Base") for line in table)  # LoRA has not reached it yet
    assert len([line for line in table if line.startswith("**")]) == 1
    store = tmp_path / "results.jsonl"
    store.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    write_report([store], tmp_path / "out")
    assert (tmp_path / "out" / "tables" / "training_modes.md").read_text() == mode_comparison(runs_frame(rows))
    store.write_text(json.dumps(rows[-1]) + "\n")  # results without a second mode: no stale table left behind
    write_report([store], tmp_path / "out")
    assert not (tmp_path / "out" / "tables" / "training_modes.md").exists()


def fair_row(fusion, trial, rate, dev, test, layer=None, n=32):
    row = ner_row(fusion, n, 25, trial, dev, backbone="/m/deep")
    row["config"] |= {"learning_rate": rate, "layers": str(layer) if layer is not None else "all"}
    row["test_scores"] = {"f1": test}
    row["backbone_layers"] = 3
    row["num_dev_sentences"] = 200
    row.pop("dev_layer_weights", None)
    return row


def test_the_fair_report_chooses_each_method_s_rate_and_layer_on_dev_and_reports_their_test_score(tmp_path):
    rows = []
    for trial in range(3):
        for layer in (1, 2, 3):
            for rate in (1e-4, 1e-3):
                # Layer 2 at 1e-3 is best on dev; layer 1 at 1e-4 is best on test (a choice on test would take it).
                dev = 0.5 + 0.1 * (layer == 2) + 0.05 * (rate == 1e-3) + 0.01 * trial
                test = 0.9 if (layer, rate) == (1, 1e-4) else dev - 0.02
                rows.append(fair_row("base", trial, rate, dev, test, layer))
        for rate in (1e-4, 1e-3):
            rows.append(fair_row("dwatt", trial, rate, 0.7 if rate == 1e-4 else 0.6, 0.66 + 0.01 * trial))
    store = tmp_path / "fair.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = write_report([store], tmp_path / "out", title="fair")
    table = pd.read_csv(tmp_path / "out" / "tables" / "fair_comparison.csv").set_index("method")
    best = table.loc["best single layer"]
    assert best.layers == "2, 2, 2" and best.learning_rates == "0.001, 0.001, 0.001"
    assert best.test_score == pytest.approx(100 * (0.65 + 0.01 - 0.02))  # the dev choice's test F1, mean of 3 trials
    last = table.loc["last layer"]
    assert last.layers == "3, 3, 3" and last.test_score == pytest.approx(100 * (0.55 + 0.01 - 0.02))
    assert table.loc["DWAtt"].learning_rates == "0.0001, 0.0001, 0.0001"
    assert table.loc["DWAtt"].minus_best_layer == pytest.approx(100 * (0.67 - 0.64))
    assert math.isnan(best.minus_best_layer)
    # selection regret: dev took layer 2 at 1e-3, test would have taken layer 1 at 1e-4 (0.9)
    assert best.regret == pytest.approx(100 * (0.63 + 0.01 - 0.9)) and table.loc["DWAtt"].regret == 0 == last.regret
    regret = (tmp_path / "out" / "tables" / "regret.md").read_text()
    assert regret.splitlines()[:3] == ["| backbone | dataset | N | last layer | best single layer | DWAtt |",
                                       "|---|---|---|---|---|---|", "| deep | conll2003 | 32 | +0.00 ± 0.00 | -26.00 ± 2.48 | +0.00 ± 0.00 |"]
    assert regret in report.read_text() and "Dev set: a dev set of 200 sentences." in report.read_text()
    text = report.read_text()
    assert "**deep, conll2003, FE, 25 epochs: test F1 of the run chosen on dev**\n\nLearning rates tried: 0.0001, 0.001.\n" in text
    verdict = (tmp_path / "out" / "tables" / "fair_verdicts.md").read_text()
    assert verdict in text and verdict.startswith("- **deep**, conll2003, N = 32 (3 trials): the best single layer 64.00 (layer 2, 2, 2).")
    assert "Fusions that beat it: DWAtt +3.00 ± 0.00; level with it (95% CI spans 0): none; that trail it: none." in verdict
    assert verdict.rstrip().endswith("The last layer: -10.00 ± 0.00. Chosen at the largest learning rate tried in every "
                                     "trial (a larger one might score higher): last layer, best single layer.")
    assert list(table.at_largest_rate) == [True, True, False]  # last layer, best layer: 1e-3 of 1e-4 and 1e-3
    answer = (tmp_path / "out" / "tables" / "fair_answer.md").read_text()
    assert answer == ("On CoNLL-03 test F1, each method at its own learning rate chosen on a dev set of 200 sentences "
                      "(deep at N = 32), a fusion "
                      "beats the best single layer in DWAtt on deep at N = 32 (+3.00 ± 0.00 F1 over 3 trials), of 1 fusion-setting "
                      "pairs (where no method differs, about 0.0 of them would beat it by chance alone); the last layer "
                      "trails the best one by 10.0 F1.\n")
    assert "dev F1" not in (tmp_path / "out" / "tables" / "fair_comparison.md").read_text()  # test scores only
    assert (tmp_path / "out" / "figures" / "probe.png").exists() and "fig2_f1_vs_n" not in text
    probe = pd.read_csv(tmp_path / "out" / "tables" / "probe.csv")
    # layer 1: 1e-3 wins on dev (its test F1, 0.53-0.55), not 1e-4 (0.9 on test)
    assert list(probe.layer) == [1, 2, 3] and probe.test_score.iloc[0] == pytest.approx(100 * (0.55 + 0.01 - 0.02))


def test_a_fusion_beats_or_trails_the_best_layer_only_where_the_interval_excludes_zero():
    from dwatt.experiment.selection import verdict

    assert verdict(2.0, 1.5) == "beats" and verdict(-2.0, 1.5) == "trails"
    assert verdict(1.0, 1.5) == verdict(-1.0, 1.5) == "level" and verdict(5.0, math.nan) == "one trial"


def test_the_fair_answer_says_when_no_fusion_beats_the_best_layer():
    from dwatt.experiment.report import fair_answer

    table = pd.DataFrame({"backbone": ["m"] * 4, "dataset": ["conll2003"] * 4, "n_shot": [32] * 4,
                          "method": ["best single layer", "last layer", "DWAtt", "Concat"],
                          "minus_best_layer": [math.nan, -12.0, 1.0, -4.0], "minus_best_layer_ci95": [math.nan, 2.0, 3.0, 1.0]})
    assert fair_answer(table) == ("On CoNLL-03 test F1, each method at its own learning rate chosen on the dev split (m at N = "
                                  "32), no fusion beats a head on the best single layer (the 95% CI of every paired difference "
                                  "reaches 0 or below); the last layer trails the best one by 12.0 F1.\n")
    assert fair_answer(table.assign(minus_best_layer_ci95=math.nan)) == ""  # one trial each: no answer yet
    assert fair_answer(table.assign(dataset="wikiann:sw")).startswith("On wikiann:sw test F1")
    assert "chosen on a dev set of 1000 sentences (m at" in fair_answer(table.assign(dev_sentences=1000.0))


def test_the_fair_answer_says_where_the_last_layer_trails_and_where_its_interval_spans_0():
    from dwatt.experiment.report import fair_answer

    table = pd.DataFrame({"backbone": ["m", "m", "m", "m"], "dataset": ["ag_news"] * 4, "n_shot": [16, 16, 64, 64],
                          "method": ["best single layer", "last layer"] * 2,
                          "minus_best_layer": [math.nan, 0.75, math.nan, -5.0], "minus_best_layer_ci95": [math.nan, 4.73, math.nan, 1.0],
                          "metric": ["accuracy"] * 4})
    assert fair_answer(table).endswith("the last layer trails the best one in 1 of 2 settings by 5.0 accuracy points, and it is "
                                       "level with the best one (95% CI spans 0) on m at N = 16 (+0.75 ± 4.73 accuracy points).\n")
    level = table[table.n_shot == 16]
    assert fair_answer(level).endswith("the last layer is level with the best one (95% CI spans 0) on m at N = 16 (+0.75 ± 4.73 "
                                       "accuracy points).\n")


def test_a_probe_that_leaves_out_the_last_layer_has_no_last_layer_method():
    from dwatt.experiment.selection import chosen_on_dev, with_methods
    from dwatt.experiment.summaries import runs_frame

    rows = [fair_row("base", 0, rate, 0.5 + 0.1 * layer, 0.5, layer) for layer in (1, 2) for rate in (1e-4, 1e-3)]
    picks = chosen_on_dev(with_methods(runs_frame(rows)))  # the backbone has 3 layers; layer 2 is not its last
    assert list(picks.method) == ["best single layer"] and picks.layer.iloc[0] == 2
    rows.append(fair_row("base", 0, 1e-3, 0.3, 0.4, 3))
    picks = chosen_on_dev(with_methods(runs_frame(rows)))
    assert list(picks.method) == ["last layer", "best single layer"] and picks.layer.iloc[0] == 3


def test_the_fair_table_names_each_method_s_rates_where_the_grids_differ():
    from dwatt.experiment.report import fair_table
    from dwatt.experiment.selection import fair_comparison
    from dwatt.experiment.summaries import runs_frame

    rows = [fair_row("base", trial, rate, 0.5 + 0.1 * layer, 0.5, layer) for trial in range(2) for layer in (1, 2, 3)
            for rate in (1e-4, 1e-3, 1e-2)]
    rows += [fair_row("dwatt", trial, rate, 0.6, 0.6) for trial in range(2) for rate in (1e-4, 1e-3)]  # not yet at 1e-2
    text = fair_table(fair_comparison(runs_frame(rows)))
    assert "Learning rates tried" not in text and text.splitlines()[2].endswith("| learning rates tried |")
    assert "| 32 | DWAtt | 60.00 ± 0.00 | +10.00 ± 0.00 | 0.0001, 0.0001 |  | 2 | 0.0001, 0.001 |" in text
    assert "| 32 | best single layer | 50.00 ± 0.00 |  | 0.0001, 0.0001 | 3, 3 | 2 | 0.0001, 0.001, 0.01 |" in text


def snapshot(folder) -> dict:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("bad", ["missing store", "empty store", "row with an empty config", "figure fails"])
def test_a_report_that_fails_leaves_the_earlier_report_byte_for_byte(tmp_path, bad, capsys, monkeypatch):
    from dwatt.cli import main

    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(r) for r in every_experiment()) + "\n")
    output = tmp_path / "R"
    (output / "notes.txt").parent.mkdir()
    (output / "notes.txt").write_text("mine")  # not the report's: stays whatever happens
    assert main(["report", str(good), "--output", str(output)]) == 0
    before = snapshot(output)
    assert "tables/ner_summary.csv" in before and "figures/fig2_f1_vs_n.png" in before
    store = tmp_path / "bad.jsonl"
    message = {"missing store": r"nope\.jsonl: not a readable results file", "empty store": r"bad\.jsonl: no runs to report",
               "row with an empty config": r"bad\.jsonl:1: the row's config lacks 'backbone', 'mode', 'fusion', 'epochs'",
               "figure fails": r"no room left"}[bad]
    if bad == "empty store":
        store.write_text("")
    elif bad == "row with an empty config":
        store.write_text('{"config": {}}\n')
    elif bad == "figure fails":
        store = good

        def no_room(*args, **kwargs):
            raise OSError(28, "no room left")
        monkeypatch.setattr("dwatt.experiment.report.draw_all", no_room)
    paths = [str(tmp_path / "nope.jsonl") if bad == "missing store" else str(store)]
    assert main(["report", *paths, "--output", str(output)]) == 2
    import re

    assert re.search(message, capsys.readouterr().err)
    assert snapshot(output) == before
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []  # no scratch folder left


def test_a_report_without_its_extra_names_the_install_command(tmp_path, monkeypatch, capsys):
    import sys

    from dwatt.cli import main

    for name in [name for name in sys.modules if name == "dwatt.experiment.report" or name.startswith(("matplotlib", "dwatt.experiment.figures"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an install without the extra gives
    assert main(["report", str(tmp_path / "r.jsonl"), "--output", str(tmp_path / "R")]) == 2
    assert 'dwatt report needs matplotlib for its tables and figures: pip install "dwatt[report]"' in capsys.readouterr().err


def test_the_coverage_table_counts_the_runs_held_against_the_grid_the_rows_span(tmp_path):
    rows = [fair_row("base", trial, rate, 0.5, 0.5, layer) for trial in range(3) for layer in (1, 2, 3) for rate in (1e-4, 1e-3)]
    rows += [fair_row("dwatt", trial, rate, 0.6, 0.6) for trial in range(3) for rate in (1e-4, 1e-3)]
    rows += [fair_row("dwatt", 0, 1e-2, 0.6, 0.6)]  # past the grid's edge, in one trial
    rows += [fair_row("base", 0, 1e-4, 0.5, 0.5, layer, n=128) for layer in (1, 2)]  # N = 128: a probe begun
    store = tmp_path / "fair.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in rows))
    write_report([store], tmp_path / "out", title="fair")
    table = (tmp_path / "out" / "tables" / "coverage.md").read_text().splitlines()
    assert table[2:] == ["| backbone | dataset | N | Base (probe) | DWAtt |", "|---|---|---|---|---|",
                         "| deep | conll2003 | 32 | 3/3 | 1/3 (7/9 runs) |",
                         "| deep | conll2003 | 128 | 0/3 (2/18 runs) | 0/3 (0/9 runs) |"]
    assert "## Coverage" in (tmp_path / "out" / "report.md").read_text()


def test_the_fair_report_of_text_classification_chooses_on_dev_accuracy_and_reports_test_accuracy(tmp_path):
    def cls_row(fusion, trial, rate, dev, test, layer=None):
        return {"task": "cls", "seed": trial, "best_dev_accuracy": dev, "test_scores": {"accuracy": test, "macro_f1": test},
                "backbone_layers": 2, "num_dev_examples": 800,
                "config": {"backbone": "/m/enc", "fusion": fusion, "mode": "fe", "dataset": "ag_news", "n_shot": 16,
                           "epochs": 20, "task": "cls", "learning_rate": rate,
                           "layers": str(layer) if layer is not None else "all"}}

    rows = []
    for trial in range(3):
        for rate in (1e-3, 1e-2):
            for layer in (1, 2):  # layer 1 at 1e-2 is best on dev
                rows.append(cls_row("base", trial, rate, 0.5 + 0.2 * (layer == 1) + 0.1 * (rate == 1e-2), 0.7 + 0.01 * trial, layer))
            rows.append(cls_row("dwatt", trial, rate, 0.6 + 0.1 * (rate == 1e-3), 0.75 + 0.01 * trial))
    store = tmp_path / "fair.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = write_report([store], tmp_path / "out", title="fair").read_text()
    table = pd.read_csv(tmp_path / "out" / "tables" / "fair_comparison.csv").set_index("method")
    assert set(table.metric) == {"accuracy"} and table.loc["best single layer"].layers == "1, 1, 1"
    assert table.loc["DWAtt"].learning_rates == "0.001, 0.001, 0.001"
    assert table.loc["DWAtt"].minus_best_layer == pytest.approx(5.0)
    assert "| N | method | test accuracy |" in report and "test accuracy of the run chosen on dev" in report
    answer = (tmp_path / "out" / "tables" / "fair_answer.md").read_text()
    assert answer.startswith("On AG News test accuracy, each method at its own learning rate chosen on a dev set of 800 "
                             "texts (enc at N = 16), a fusion beats the best single layer in DWAtt on enc at N = 16 "
                             "(+5.00 ± 0.00 accuracy points over 3 trials)")


def test_the_fair_report_makes_every_choice_again_on_each_trial_s_few_shot_dev_sample(tmp_path):
    rows = []
    for trial in range(3):
        for layer in (1, 2):
            for rate in (1e-4, 1e-3):
                # On the 1000 dev sentences layer 2 at 1e-3 wins; on the small sample, layer 1 at 1e-4 (its test: 0.5)
                row = fair_row("base", trial, rate, 0.5 + 0.1 * (layer == 2) + 0.05 * (rate == 1e-3), 0.6 + 0.01 * trial, layer)
                small = 0.9 if (layer, rate) == (1, 1e-4) else 0.4
                row["few_shot_dev"] = {"sentences": 128, "best_f1": small, "best_epoch": 3.0, "test_scores": {"f1": 0.5}}
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


def test_with_no_dev_set_the_report_takes_the_last_epoch_at_dwatt_train_s_rate(tmp_path):
    """The no-dev table: the last layer and each fusion at the FE rate (1e-3), each at its last epoch, paired by
    trial against the last layer; runs at other rates and runs without a scored last epoch stay out."""
    rows = []
    for trial in range(3):
        for rate in (1e-4, 1e-3):
            for layer in (1, 3):
                row = fair_row("base", trial, rate, 0.6, 0.6, layer)
                row["last_epoch"] = {"epoch": 25, "test_scores": {"f1": 0.40 + 0.01 * trial + (0.3 if rate == 1e-4 else 0)}}
                rows.append(row)
            row = fair_row("dwatt", trial, rate, 0.6, 0.6)
            row["last_epoch"] = {"epoch": 25, "test_scores": {"f1": 0.45 + 0.01 * trial}}
            rows.append(row)
        rows.append(fair_row("concat", trial, 1e-3, 0.7, 0.7))  # no last epoch scored: not in the table
    store = tmp_path / "fair.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = write_report([store], tmp_path / "out", title="fair").read_text()
    table = (tmp_path / "out" / "tables" / "no_dev.md").read_text()
    assert "test F1 at the last epoch, learning rate 0.001" in table
    assert "| 32 | last layer | 41.00 ± 2.48 |  | 3 |" in table  # layer 3 of 3, at 1e-3 only
    assert "| 32 | DWAtt | 46.00 ± 2.48 | +5.00 ± 0.00 | 3 |" in table
    assert "Concat" not in table and "## With no dev set" in report


def test_coverage_counts_a_method_whose_runs_have_only_begun_against_the_whole_grid():
    from dwatt.experiment.selection import coverage
    from dwatt.experiment.summaries import runs_frame

    rows = [fair_row("base", 0, rate, 0.5, 0.5, layer) for layer in (1, 2, 3) for rate in (1e-4, 1e-3, 1e-2)]
    rows += [fair_row("concat", 0, rate, 0.5, 0.5) for rate in (1e-4, 1e-3, 1e-2)]
    rows += [fair_row("dwatt", 0, 1e-4, 0.5, 0.5)]  # one rate of three so far
    covered = coverage(runs_frame(rows)).set_index("method")
    assert covered.loc["DWAtt"].planned_runs == 3 and covered.loc["DWAtt"].complete_trials == 0
    assert covered.loc["Concat"].complete_trials == 1 and covered.loc["Base (probe)"].planned_runs == 9


def test_probe_ensembles_are_methods_of_the_fair_report_with_their_layers_and_the_probe_s_rates(tmp_path):
    """A probe group's ensembles (on its first run's row) become one method per size, paired by trial with the best
    single layer; their layers are listed per trial (chosen on dev, or on the few-shot sample in that table), their
    rates are each layer's own, and they count as one planned run per trial in the coverage."""
    rows = []
    for trial in range(3):
        group = [fair_row("base", trial, rate, 0.5 + 0.1 * layer, 0.6, layer) for layer in (1, 2, 3) for rate in (1e-4, 1e-3)]
        members = lambda layers: [{"layer": layer, "learning_rate": 1e-3, "epoch": 2.0, "f1": 0.5} for layer in layers]
        group[0]["probe_ensembles"] = [{
            "size": 3, "members": members([3, 2, 1]), "best_f1": 0.7, "test_scores": {"f1": 0.63 + 0.01 * trial},
            "candidates": {"layers": [1, 2, 3], "learning_rates": [1e-4, 1e-3]},
            "few_shot_dev": {"sentences": 128, "seed": trial, "members": members([1, 3, 2]), "best_f1": 0.8,
                             "test_scores": {"f1": 0.55}}}]
        for row in group:
            row["few_shot_dev"] = {"sentences": 128, "best_f1": 0.4, "best_epoch": 3.0, "test_scores": {"f1": 0.6}}
        rows += group
    # the grid's store without the ensembles, and a probe trained again for them in its own store (the same runs)
    store, again = tmp_path / "fair.jsonl", tmp_path / "fair.ensembles.jsonl"
    store.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "probe_ensembles"}) + "\n" for row in rows))
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
    assert "Fusions or probe ensembles that beat it: top-3 layers averaged +4.00" in (tables / "fair_verdicts.md").read_text()
    assert "a fusion or probe ensemble beats the best single layer" in (tables / "fair_answer.md").read_text()
    coverage = (tables / "coverage.md").read_text()
    assert "| top-3 layers averaged |" in coverage and "| 3/3 | 3/3 |" in coverage
    # a run trained again with another result is still refused, ensembles or not
    changed = [dict(row, test_scores={"f1": 0.1}) for row in rows if "probe_ensembles" in row]
    again.write_text("".join(json.dumps(row) + "\n" for row in changed))
    with pytest.raises(ValueError, match="appears twice with different results"):
        write_report([store, again], tmp_path / "out2", title="fair")


def test_a_run_trained_again_by_newer_code_counts_once_as_the_row_that_holds_more():
    """The same run from an older store (no last epoch scored, trained beside other runs) and from a newer one (the
    last epoch, the group's ensembles): the newer row is kept; a row that disagrees on a field both hold is refused."""
    from dwatt.experiment.summaries import without_duplicates

    old = fair_row("base", 0, 1e-3, 0.5, 0.6, 1) | {"trained_together": [25] * 5, "trained_together_runs": 30,
                                                     "_path": "old.jsonl"}
    new = old | {"trained_together_runs": 36, "last_epoch": {"epoch": 25, "test_scores": {"f1": 0.55}},
                 "probe_ensembles": [], "_path": "new.jsonl"}
    assert without_duplicates([old, new]) == [new] and without_duplicates([new, old]) == [new]
    with pytest.raises(ValueError, match=r"appears twice with different results \(best_dev_f1\)"):
        without_duplicates([old, new | {"best_dev_f1": 0.4}])
