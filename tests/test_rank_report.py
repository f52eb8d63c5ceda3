"""`dwatt rank-report` on a committed store and ranking: the agreement, summary, advice and label-budget tables."""

from pathlib import Path

import pandas as pd

from dwatt.cli import main

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "docs/results/fair-few-shot-dev/fair.all-MiniLM-L6-v2.probe-ensembles.jsonl"
RANKINGS = ROOT / "docs/results/rank-layers/all-MiniLM-L6-v2.conll2003"


def test_the_report_tables_each_measure_against_the_probes_dev_choice(tmp_path, capsys):
    code = main(["rank-report", str(STORE), "--rankings", str(RANKINGS), "--output", str(tmp_path)])
    assert code == 0 and "label_free.md" in capsys.readouterr().out
    text = (tmp_path / "label_free.md").read_text()
    for name in ("agreement", "summary", "advice", "label_budget"):
        assert (tmp_path / "tables" / f"{name}.md").read_text() in text
    table = pd.read_csv(tmp_path / "tables" / "agreement.csv")
    assert set(table.measure) == {
        "prompt_entropy",
        "dataset_entropy",
        "curvature",
        "effective_rank",
        "intrinsic_dimension",
        "last_layer",  # the reference row
    }
    assert (table.backbone == "all-MiniLM-L6-v2").all() and (table.trials >= 3).all()
    budget = pd.read_csv(tmp_path / "tables" / "label_budget.csv")
    assert (budget.dev_examples < budget.full_dev_examples).all()


def test_a_store_with_no_ranked_setting_is_refused_in_one_line(tmp_path, capsys):
    empty = tmp_path / "none"
    empty.mkdir()
    assert main(["rank-report", str(STORE), "--rankings", str(empty), "--output", str(tmp_path / "out")]) == 2
    assert "no setting of the stores has a ranking" in capsys.readouterr().err
