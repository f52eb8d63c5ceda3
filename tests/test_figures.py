"""Figures (dwatt.experiment.figures): what each figure draws from the rows, and what the report says it could not draw."""

import json

from dwatt.experiment.report import runs_frame, write_report

from .helpers import mlm_row, ner_row


def test_budgets_run_at_the_largest_n_only_are_drawn_against_the_budget():
    from dwatt.experiment.figures import figure_budgets

    rows = [ner_row(f, n, 4, t, 0.3) for f in ("concat", "dwatt") for n in (8, 32, 128) for t in range(2)]
    rows += [ner_row(f, 128, e, t, 0.4) for f in ("concat", "dwatt") for e in (9, 12) for t in range(2)]
    (axis,) = figure_budgets(runs_frame(rows)).axes
    assert axis.get_title() == "N=128" and axis.get_xlabel() == "epoch budget"
    assert [list(bars.lines[0].get_xdata()) for bars in axis.containers] == [[4, 9, 12], [4, 9, 12]]


def test_report_says_what_it_could_not_draw(tmp_path):
    store = tmp_path / "results.jsonl"
    store.write_text(json.dumps(mlm_row("dwatt", 2.0)) + "\n")
    text = write_report([store], tmp_path / "out").read_text()
    assert "Not drawn (no runs of that experiment in these results): fig2_f1_vs_n" in text
    assert "| small | ft | dwatt | 1 | 2.0 | 3.0 |" in text
