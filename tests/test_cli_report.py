"""dwatt report (dwatt.cli.report): a report that fails leaves the earlier one byte for byte, and without the report
extra the error names the install command. The tables and figures: test_experiment_report, test_figures."""

import json

import pytest

from .helpers import every_experiment


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
    message = {
        "missing store": r"nope\.jsonl: not a readable results file",
        "empty store": r"bad\.jsonl: no runs to report",
        "row with an empty config": r"bad\.jsonl:1: the row's config lacks 'backbone', 'mode', 'fusion', 'epochs'",
        "figure fails": r"no room left",
    }[bad]
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

    for name in [
        name
        for name in sys.modules
        if name == "dwatt.experiment.report" or name.startswith(("matplotlib", "dwatt.experiment.figures"))
    ]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an install without the extra gives
    assert main(["report", str(tmp_path / "r.jsonl"), "--output", str(tmp_path / "R")]) == 2
    assert (
        'dwatt report needs matplotlib for its tables and figures: pip install "dwatt[report]"'
        in capsys.readouterr().err
    )


def snapshot(folder) -> dict:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}
