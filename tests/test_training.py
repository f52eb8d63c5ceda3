"""Training runs (dwatt.training): cached and uncached runs agree, a run's CPU time, the CLI end to end and its
refusals, masked-LM runs, a fixed dev subset. The cache itself: test_features; freezing: test_callbacks; scores:
test_metrics; layer weights: test_layer_weights."""

import json
import time

import pytest

from dwatt.cli import main
from dwatt.data import load_conll2003
from dwatt.training import RunConfig, run, run_ner

from .helpers import tiny_ner_run_config


def test_cached_and_uncached_runs_reach_the_same_dev_scores(tiny_backbone, tiny_conll, tmp_path):
    cached = run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "cached", save_model=False))
    uncached = run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "uncached", use_cache=False, save_model=False))
    assert cached["cached_features"] and not uncached["cached_features"]
    assert cached["sampled_sentence_ids"] == uncached["sampled_sentence_ids"]
    for mine, theirs in zip(cached["dev_curve"], uncached["dev_curve"]):
        assert abs(mine["f1"] - theirs["f1"]) <= 0.001


def test_a_run_records_its_cpu_time_beside_its_wall_time_so_that_waiting_for_a_core_shows(monkeypatch):
    """Which clock each figure reads, with the clocks replaced: no timing of this machine is asserted."""
    from dwatt.training import common

    fields = common.RunClock.__dataclass_fields__  # the process's CPU time counts every thread's
    assert fields["wall"].default_factory is time.perf_counter and fields["cpu"].default_factory is time.process_time
    monkeypatch.setattr(common.time, "perf_counter", lambda: 112.5)
    monkeypatch.setattr(common.time, "process_time", lambda: 9.25)
    clock = common.RunClock(wall=100.0, cpu=7.0)  # 12.5 s waited, of which 2.25 s computing
    assert clock.elapsed() == {"wall_seconds": 12.5, "cpu_seconds": 2.25}


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


def test_mlm_run_trains_on_wikitext_files_and_reports_perplexities(tiny_backbone, tmp_path, capsys, monkeypatch):
    import math

    words = ["eu", "rejects", "german", "call", "to", "boycott", "british", "lamb", "peter", "blackburn", "brussels"]
    lines = [" ".join(words[(i + j) % len(words)] for j in range(9)) for i in range(60)]
    wikitext = tmp_path / "wikitext"
    wikitext.mkdir()
    (wikitext / "valid.txt").write_text("\n".join(lines) + "\n")
    (wikitext / "test.txt").write_text("\n".join(lines[:20]) + "\n")
    out = tmp_path / "mlm"
    assert main(["train", "--task", "mlm", "--backbone", str(tiny_backbone), "--data-dir", str(wikitext), "--epochs", "2",
                 "--block-size", "8", "--output-dir", str(out), "--quiet", "--no-save", "--lr", "1e-3"]) == 0
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

    monkeypatch.setattr("datasets.load_dataset", hub_dataset)
    with pytest.raises(ConnectionError):
        run(RunConfig(task="mlm", backbone=str(tiny_backbone), output_dir=str(tmp_path / "x")))
    assert asked == [("wikitext", "wikitext-2-raw-v1")]


def test_dev_sentences_scores_a_fixed_subset(tiny_backbone, tiny_conll, tmp_path):
    runs = [run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / str(seed), save_model=False, seed=seed,
                               dev_sentences=3)) for seed in (0, 1)]
    assert [r["num_dev_sentences"] for r in runs] == [3, 3]
    supports = [{k: v for k, v in r["best_dev_scores"].items() if k.endswith("_support")} for r in runs]
    assert supports[0] == supports[1]  # every trial is scored on the same sentences
    assert len(load_conll2003(tiny_conll)["validation"]) > 3
    with pytest.raises(ValueError, match="--dev-sentences must be > 0"):
        run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "x", dev_sentences=0))
