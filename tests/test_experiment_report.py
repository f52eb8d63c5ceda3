"""The report (dwatt.experiment.report): mean ± t-interval tables, the paper comparison, the depth and mode
comparisons, every table and figure written from results rows. Reading the rows: test_summaries; the fair comparison:
test_selection; the figures: test_figures; the command: test_cli_report."""

import json
import math

import pandas as pd
import pytest

from dwatt.experiment.figures import FIGURES, draw_all
from dwatt.experiment.report import runs_frame, write_report

from .helpers import T_975_2_DOF, cls_row, every_experiment, ner_row


def test_a_side_experiment_on_a_dev_subset_stays_out_of_the_grid_figures_and_tables(tmp_path):
    grid = [
        ner_row(f, n, 4, t, 0.1 + 0.2 * (f == "dwatt") + n / 1000)
        for f in ("base_plus_n", "dwatt")
        for n in (8, 32, 128)
        for t in range(2)
    ]
    side = [
        ner_row(f, n, 8, 0, 0.9, mode=mode) | {"num_dev_sentences": 500}
        for f in ("base_plus_n", "dwatt")
        for n in (8, 128)
        for mode in ("fe", "ft")
    ]
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
    rows = [
        ner_row(f, n, 4, t, 0.3 + 0.1 * t + 0.05 * (f == "dwatt"))
        for f in ("base_plus_n", "dwatt")
        for n in (8, 128)
        for t in range(3)
    ]
    rows += [
        ner_row(f, 128, 9, t, 0.2 * t + gains[t] * (f == "dwatt")) for f in ("base_plus_n", "dwatt") for t in range(3)
    ]
    rows += [ner_row("dwatt", 128, 9, 3, 0.9)]  # a trial without its Base+n run has no pair
    from dwatt.experiment.report import paper_comparison

    comparison = paper_comparison(runs_frame(rows))
    assert "| +5.00 ± 0.00 | small, N=128, 4 epochs, 3 trials |" in comparison  # Figure 2's budget (most N values)
    ci = T_975_2_DOF * 2 / math.sqrt(3)  # trial-to-trial spread of 20 points cancels in the pairs
    assert f"| +12.00 ± {ci:.2f} | small, N=128, 9 epochs, 3 trials |" in comparison
    assert comparison.index("4 epochs, 3 trials") < comparison.index("9 epochs, 3 trials")
    unpaired = [ner_row("dwatt", 128, 4, 0, 0.5), ner_row("base_plus_n", 128, 4, 1, 0.3)]
    assert "CoNLL-03" not in paper_comparison(runs_frame(unpaired))  # no trial has both: no gain to state


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
    cell = summary[
        (summary.dataset == "conll2003")
        & (summary.backbone == "small")
        & (summary["mode"] == "fe")
        & (summary.fusion == "dwatt")
        & (summary.n_shot == 128)
        & (summary.epochs == 4)
    ].iloc[0]
    assert cell["mean"] == pytest.approx(100 * (0.4 + 0.01 + 0.128)) and cell.trials == 3
    assert cell.ci95 == pytest.approx(T_975_2_DOF * 1.0 / math.sqrt(3))  # trials 1 point apart: sd 1
    assert "| N=8, 2 epochs |" in text and text.index("N=8, 2 epochs") < text.index("N=128, 2 epochs")
    tiers = pd.read_csv(tmp_path / "out" / "tables" / "wikiann_tiers.csv")
    assert set(tiers.tier) == {"high", "medium", "low", "very low"} and set(tiers.languages) == {1}
    comparison = (tmp_path / "out" / "tables" / "paper_comparison.md").read_text()
    assert (
        "| +5.28 (N=128, 100 epochs) | +20.00 ± 0.00 | small, N=128, 4 epochs, 3 trials |" in comparison
    )  # 0.3 vs 0.1
    assert "| WikiText-2 test perplexity, DWAtt | 2.91 | 2.50 |" in comparison
    mlm = pd.read_csv(tmp_path / "out" / "tables" / "mlm_summary.csv")
    assert mlm.set_index("fusion").mean_test_ppl.to_dict() == {
        "base": 3.0,
        "base_plus_n": 3.5,
        "concat": 4.0,
        "dwatt": 2.5,
    }


def test_depth_comparison_tables_the_gain_of_fusion_over_the_last_layer_per_backbone_and_draws_where_dwatt_looks(
    tmp_path,
):
    rows = []
    for trial in range(3):
        for backbone, depth, lift in (("/m/deep-llm", 5, 0.3), ("/m/shallow", 3, 0.1)):
            weights = {
                "layers": list(range(1, depth + 1)),
                "by_type": {"PER": [1 / depth] * depth, "O": [1 / depth] * depth},
                "positions": {"PER": 3, "O": 9},
            }
            for fusion, gain in (("base", 0.0), ("concat", lift / 2), ("dwatt", lift)):
                for n in (8, 32):
                    row = ner_row(fusion, n, 25, trial, 0.2 + gain + 0.01 * trial, backbone=backbone) | {
                        "num_dev_sentences": 1000
                    }
                    if fusion == "dwatt":
                        row["dev_layer_weights"] = weights
                    rows.append(row)
            rows += [
                cls_row(f, 4, trial, 0.5 + g + 0.02 * trial)
                | {"config": cls_row(f, 4, trial, 0)["config"] | {"backbone": backbone}}
                for f, g in (("base", 0.0), ("dwatt", lift))
            ]
    path = tmp_path / "depth.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    report = write_report([path], tmp_path / "report")
    table = (tmp_path / "report" / "tables" / "fusion_gains.md").read_text().splitlines()
    assert table[0] == "| backbone (layers) | task, N | Base | Concat | DWAtt | DWAtt − Base | DWAtt − Concat |"
    deep = [line for line in table if line.startswith("| deep-llm (5)")]
    assert len(deep) == 3 and deep[0].startswith(
        "| deep-llm (5) | CoNLL-03 F1, N=8 (3 trials) | 21.00 | 36.00 | 51.00 | +30.00 ± 0.00 | +15.00 ± 0.00 |"
    )
    assert "AG News acc. (mean), N=4 (3 trials)" in deep[2] and "+30.00 ± 0.00" in deep[2]
    assert table.index(deep[0]) < min(
        table.index(line) for line in table if line.startswith("| shallow (3)")
    )  # deepest first
    assert (
        "layer_weights_by_depth" in report.read_text()
        and (tmp_path / "report" / "figures" / "layer_weights_by_depth.png").exists()
    )


def test_a_backbone_run_only_in_the_depth_grid_stays_out_of_the_paper_s_figures_and_comparison(tmp_path):
    grid = [
        ner_row(f, n, 4, t, 0.1 + 0.2 * (f == "dwatt"))
        for f in ("concat", "dwatt")
        for n in (8, 128)
        for t in range(2)
    ]
    depth = [
        ner_row(f, n, 25, 0, 0.3 + 0.1 * (f == "dwatt"), backbone="/m/llm") | {"num_dev_sentences": 1000}
        for f in ("concat", "dwatt")
        for n in (8, 128)
    ]
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
    assert (
        "fig7_base_vs_large" in skipped and not stale.exists() and (tmp_path / "figures" / "fig2_f1_vs_n.png").exists()
    )


def test_training_modes_side_by_side_pair_the_trials_every_mode_has(tmp_path):
    f1 = {"fe": 0.3, "lora": 0.4, "ft": 0.6}
    rows = [
        ner_row("dwatt", 8, 50, t, f1[m] + 0.1 * t, mode=m) | {"num_dev_sentences": 500}
        for m, trials in (("fe", 3), ("lora", 1), ("ft", 2))
        for t in range(trials)
    ]
    rows += [
        ner_row("base", 8, 50, t, 0.1, mode=m) | {"num_dev_sentences": 500} for m in ("fe", "ft") for t in range(2)
    ]
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
