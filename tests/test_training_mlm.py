"""Masked-LM runs (dwatt.training.mlm): WikiText files in, perplexities out; without a folder the Hub's WikiText-2 is asked for."""

import json

import pytest

from dwatt.cli import main
from dwatt.training import RunConfig, run


def test_mlm_run_trains_on_wikitext_files_and_reports_perplexities(tiny_backbone, tmp_path, capsys, monkeypatch):
    import math

    words = ["eu", "rejects", "german", "call", "to", "boycott", "british", "lamb", "peter", "blackburn", "brussels"]
    lines = [" ".join(words[(i + j) % len(words)] for j in range(9)) for i in range(60)]
    wikitext = tmp_path / "wikitext"
    wikitext.mkdir()
    (wikitext / "valid.txt").write_text("\n".join(lines) + "\n")
    (wikitext / "test.txt").write_text("\n".join(lines[:20]) + "\n")
    out = tmp_path / "mlm"
    assert (
        main(
            [
                "train",
                "--task",
                "mlm",
                "--backbone",
                str(tiny_backbone),
                "--data-dir",
                str(wikitext),
                "--epochs",
                "2",
                "--block-size",
                "8",
                "--output-dir",
                str(out),
                "--quiet",
                "--no-save",
                "--lr",
                "1e-3",
            ]
        )
        == 0
    )
    assert "best dev perplexity" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert results["task"] == "mlm" and results["config"]["batch_size"] == 8
    assert results["train_source"].startswith("first 90% of validation lines")
    assert len(results["dev_curve"]) == 2 and results["best_dev_loss"] == min(p["loss"] for p in results["dev_curve"])
    assert math.isclose(results["best_dev_perplexity"], math.exp(results["best_dev_loss"]))
    assert math.isfinite(results["test_perplexity"]) and results["test_perplexity"] > 1
    asked = []

    def hub_dataset(name, config):  # without --data-dir the run asks the Hub for WikiText-2 (offline here)
        asked.append((name, config))
        raise ConnectionError("offline")

    monkeypatch.setattr("dwatt.data.mlm.load_dataset", hub_dataset)
    with pytest.raises(ConnectionError):
        run(RunConfig(task="mlm", backbone=str(tiny_backbone), output_dir=str(tmp_path / "x")))
    assert asked == [("wikitext", "wikitext-2-raw-v1")]
