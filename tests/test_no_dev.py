"""With no dev set (dwatt.experiment.no_dev): the last epoch at `dwatt train`'s rate, against the last layer."""

import json

from dwatt.experiment.report import write_report

from .helpers import fair_row


def test_with_no_dev_set_the_report_takes_the_last_epoch_at_dwatt_train_s_rate(tmp_path):
    """The no-dev table: the last layer and each fusion at the FE rate (1e-3), each at its last epoch, paired by
    trial against the last layer; runs at other rates and runs without a scored last epoch stay out."""
    rows = []
    for trial in range(3):
        for rate in (1e-4, 1e-3):
            for layer in (1, 3):
                row = fair_row("base", trial, rate, 0.6, 0.6, layer)
                row["last_epoch"] = {
                    "epoch": 25,
                    "test_scores": {"f1": 0.40 + 0.01 * trial + (0.3 if rate == 1e-4 else 0)},
                }
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
