"""`dwatt readout-report`: the readout table from stores, as Markdown and CSV, and a store with nothing to compare."""

import json

from dwatt.cli import main

from .helpers import readout_rows as rows


def test_the_report_writes_the_table_and_says_how_it_judged(tmp_path, capsys):
    store = tmp_path / "results.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in rows()))
    assert main(["readout-report", str(store), "--output", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "readouts.md").read_text()
    assert "| last | 3 | 2, 2, 2 | 0.001, 0.001, 0.001 |" in text and "ahead ▲" in text and "within ±1 ≈" in text
    assert "Holm-corrected over the table's 3 readout-against-first pairs" in text
    assert (tmp_path / "report" / "readouts.csv").is_file()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["readout-report", str(empty), "--output", str(tmp_path / "none")]) == 2
    assert "nothing to compare" in capsys.readouterr().err
