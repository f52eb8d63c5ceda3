"""A text-classification probe on an encoder given no --pooling (dwatt.experiment.probe_poolings): the mean's probe
and the stock classifier's (first token) side by side, each in its own folder and store, the pooling chosen on dev
(a tie to the stock one), its head copied to <output>/chosen, and the stock export named whichever is chosen."""

import json
from types import SimpleNamespace

from dwatt.cli import main
from dwatt.experiment.probe_poolings import chosen_pooling, pooling_lines, poolings_to_try
from dwatt.experiment.probe_types import ProbeSettings


def test_an_encoder_s_text_probe_tries_both_poolings_unless_one_is_asked(tiny_backbone, tiny_decoder):
    assert poolings_to_try(ProbeSettings(task="cls", backbone=str(tiny_backbone))) == ["mean", "first"]
    assert poolings_to_try(ProbeSettings(task="cls", backbone=str(tiny_backbone), pooling="mean")) == ["mean"]
    assert poolings_to_try(ProbeSettings(task="cls", backbone=str(tiny_decoder))) == [None]  # last token, as asked
    assert poolings_to_try(ProbeSettings(task="ner", backbone=str(tiny_backbone))) == [None]


def outcome(dev: float, stock: bool):
    return SimpleNamespace(
        task="cls",
        chosen=(2, 1e-3),
        mean=lambda layer, rate: dev,
        model=f"runs/p/pooling-{'first' if stock else 'mean'}/chosen/model",
        stock_refusal=None if stock else "pools by 'mean'",
        kept=None,
    )


def test_the_better_dev_score_chooses_and_a_tie_goes_to_the_stock_pooling():
    assert chosen_pooling({"mean": outcome(80.0, False), "first": outcome(70.0, True)}) == "mean"
    assert chosen_pooling({"mean": outcome(70.0, False), "first": outcome(70.0, True)}) == "first"
    lines = pooling_lines({"mean": outcome(80.0, False), "first": outcome(70.0, True)})
    assert "  mean: layer 2 at 0.001, dev accuracy 80.00 (no stock export)" in lines
    assert any(line.startswith("chosen on dev: pooling mean (+10.00 over first") for line in lines)
    assert lines[-1].startswith("served without dwatt: dwatt export runs/p/pooling-first/chosen/model OUT")


def test_the_default_text_probe_shows_both_poolings_and_keeps_the_chosen_head_where_a_probe_keeps_it(
    tiny_backbone, tiny_topics, tmp_path, capsys
):
    argv = ["probe", "--task", "cls", "--backbone", str(tiny_backbone), "--data-dir", str(tiny_topics)]
    argv += ["--n-shot", "3", "--epochs", "2", "--learning-rates", "1e-2", "--widen", "0", "--no-baselines"]
    assert main([*argv, "--output", str(tmp_path / "p"), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "pooling mean:" in printed and "pooling first:" in printed and "poolings compared on dev" in printed
    chosen = "first" if "chosen on dev: pooling first" in printed else "mean"
    for pooling in ("mean", "first"):  # each its own question, in its own store
        assert next((tmp_path / "p" / f"pooling-{pooling}" / "questions").glob("*/results.jsonl")).is_file()
    kept = json.loads((tmp_path / "p" / "chosen" / "model" / "config.json").read_text())
    assert kept["pooling"] == chosen
    stock = tmp_path / "p" / "pooling-first" / "chosen" / "model"
    assert f"served without dwatt: dwatt export {stock} OUT --format transformers" in printed
    assert main(["export", str(stock), str(tmp_path / "stock"), "--format", "transformers"]) == 0


def test_a_probe_asked_for_one_pooling_keeps_its_head_where_it_always_did(
    tiny_backbone, tiny_topics, tmp_path, capsys
):
    argv = [
        "probe",
        "--task",
        "cls",
        "--backbone",
        str(tiny_backbone),
        "--data-dir",
        str(tiny_topics),
        "--n-shot",
        "3",
    ]
    argv += ["--epochs", "1", "--learning-rates", "1e-2", "--layers", "1", "--widen", "0", "--no-baselines"]
    assert main([*argv, "--pooling", "first", "--output", str(tmp_path / "p"), "--quiet"]) == 0
    assert "pooling first:" not in capsys.readouterr().out
    assert (tmp_path / "p" / "chosen" / "model" / "config.json").is_file() and not (
        tmp_path / "p" / "pooling-first"
    ).exists()
