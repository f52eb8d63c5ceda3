"""dwatt train (dwatt.cli.train): a run end to end through evaluate and predict, and the arguments it refuses."""

import json

import pytest

from dwatt.cli import main


def test_cli_train_evaluate_predict_end_to_end(tiny_backbone, tiny_conll, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--backbone", str(tiny_backbone), "--data-dir", str(tiny_conll), "--n-shot", "2",
                 "--epochs", "2", "--batch-size", "4", "--output-dir", str(out), "--quiet", "--test"])
    assert code == 0
    assert "best dev F1" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    for key in ("best_dev_f1", "best_epoch", "final_dev_f1", "best_dev_scores", "wall_seconds",
                "cpu_seconds", "train_examples_per_second", "sampled_sentence_ids", "dev_curve", "test_scores", "seed"):
        assert key in results, key
    assert len(results["sampled_sentence_ids"]) == 8 and len(results["dev_curve"]) == 2
    assert results["config"]["fusion"] == "dwatt" and "PER_f1" in results["best_dev_scores"]
    assert main(["evaluate", str(out / "model"), "--data-dir", str(tiny_conll)]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["f1"] == pytest.approx(results["best_dev_f1"], abs=1e-6)
    assert main(["predict", str(out / "model"), "Peter Blackburn rejects"]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert [line.split()[0] for line in lines[:3]] == ["Peter", "Blackburn", "rejects"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--n-shot", "1000"], "cannot sample 1000 x 4"),
        (["--epochs", "0"], "--epochs must be > 0"),
        (["--backbone", "/no/such/model"], "--backbone: no model folder"),
    ],
)
def test_cli_refuses_bad_arguments(tiny_backbone, tiny_conll, tmp_path, capsys, argv, message):
    base = ["train", "--backbone", str(tiny_backbone), "--data-dir", str(tiny_conll), "--output-dir", str(tmp_path), "--quiet"]
    assert main(base + argv) == 2
    assert message in capsys.readouterr().err
