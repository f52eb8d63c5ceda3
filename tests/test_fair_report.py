"""The fair-comparison report (dwatt.experiment.fair_report): its tables, on constructed rows (the whole report, from
stores to files, is tested in test_selection.py)."""

from .helpers import fair_row


def test_the_fair_table_names_each_method_s_rates_where_the_grids_differ():
    from dwatt.experiment.fair_report import fair_table
    from dwatt.experiment.selection import fair_comparison
    from dwatt.experiment.summaries import runs_frame

    rows = [
        fair_row("base", trial, rate, 0.5 + 0.1 * layer, 0.5, layer)
        for trial in range(2)
        for layer in (1, 2, 3)
        for rate in (1e-4, 1e-3, 1e-2)
    ]
    rows += [
        fair_row("dwatt", trial, rate, 0.6, 0.6) for trial in range(2) for rate in (1e-4, 1e-3)
    ]  # not yet at 1e-2
    text = fair_table(fair_comparison(runs_frame(rows)))
    assert "Learning rates tried" not in text and text.splitlines()[2].endswith("| learning rates tried |")
    assert "| 32 | DWAtt | 60.00 ± 0.00 | +10.00 ± 0.00 | 0.0001, 0.0001 |  | 2 | 0.0001, 0.001 |" in text
    assert "| 32 | best single layer | 50.00 ± 0.00 |  | 0.0001, 0.0001 | 3, 3 | 2 | 0.0001, 0.001, 0.01 |" in text
