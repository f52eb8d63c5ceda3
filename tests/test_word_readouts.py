"""Word readouts (`DWAttConfig.word_readout`): a word read at its first or last sub-token, as their mean, or in the
second copy of the input given twice; through encoding, the model, the feature cache, training, evaluation,
prediction and export, on a tiny decoder (where a word's first sub-token has not seen the rest of it)."""

import json

import pytest
import torch

from base_model_dwatt import read_words
from dwatt import DWAttForTokenClassification
from dwatt.cli import main
from dwatt.data import encode_words, load_tokenizer
from dwatt.experiment.grid import grid
from dwatt.experiment.probe_types import ProbeSettings
from dwatt.serving.stock_export import stock_refusal
from dwatt.training import RunConfig
from specs_dwatt import WORD_READOUTS, word_readout_parts

SENTENCES = [["Peter", "Blackburn", "visited", "Brussels", "."], ["EU", "rejects", "German", "call"]]


def test_the_last_and_mean_readouts_put_each_words_vector_at_every_one_of_its_positions():
    word_ids = torch.tensor([[-1, 0, 0, 1, 2, 2, 2, -1], [0, 1, 1, -1, -1, -1, -1, -1]])
    states = torch.randn(2, 3, 8, 4)  # (batch, layers, seq, hidden)
    last, mean = read_words(states, word_ids, "last"), read_words(states, word_ids, "mean")
    for row, spans in ((0, [(1, 3), (3, 4), (4, 7)]), (1, [(0, 1), (1, 3)])):
        for start, end in spans:
            for position in range(start, end):
                assert torch.equal(last[row, :, position], states[row, :, end - 1])
                assert torch.allclose(mean[row, :, position], states[row, :, start:end].mean(1), atol=1e-6)
    outside = word_ids < 0
    for read in (last, mean):
        assert torch.equal(read.movedim(1, 2)[outside], states.movedim(1, 2)[outside])  # not words: unchanged
        assert torch.allclose(read_words(read, word_ids, "last" if read is last else "mean"), read, atol=1e-6)
    assert read_words(states, word_ids, "first") is states and read_words(states, None, "mean") is states
    layer_by_layer = read_words([states[:, 0], states[:, 1]], word_ids, "mean")
    assert torch.allclose(layer_by_layer[1], mean[:, 1], atol=1e-6)
    with pytest.raises(ValueError, match=r"word_ids has shape \(2, 7\)"):
        read_words(states, word_ids[:, :7], "last")


def test_an_echo_readout_gives_the_words_twice_and_scores_them_in_the_second_copy(tiny_decoder):
    tokenizer = load_tokenizer(tiny_decoder)
    once, _ = encode_words(tokenizer, SENTENCES, 64, readout="last")
    twice, _ = encode_words(tokenizer, SENTENCES, 64, readout="echo-last")
    for row in range(len(SENTENCES)):
        ids, words = once["input_ids"][row], once["word_ids"][row]
        inside = [p for p, word in enumerate(words) if word >= 0]
        start, end = inside[0], inside[-1] + 1
        assert twice["input_ids"][row] == ids[:end] + ids[start:end] + ids[end:]
        assert twice["word_ids"][row] == words[:start] + [-1] * (end - start) + words[start:]
        scored = [p for p, flag in enumerate(twice["scored"][row]) if flag]
        assert len(scored) == len(SENTENCES[row]) and min(scored) >= end  # each word once, in the second copy
        assert [twice["word_ids"][row][p] for p in scored] == list(range(len(SENTENCES[row])))


@pytest.mark.parametrize("readout", ["last", "echo-mean"])
def test_a_word_cut_by_a_window_edge_is_scored_where_a_window_holds_it_whole(tiny_decoder, readout):
    tokenizer = load_tokenizer(tiny_decoder)
    words = ["Blackburn", "visited", "Brussels", "rejects", "Commission", "disagreed", "consumers"] * 3
    pieces = [len(tokenizer(" " + word if i else word)["input_ids"]) for i, word in enumerate(words)]
    assert max(pieces) > 1  # some words are several sub-tokens, so a window's edge can cut one
    rows, counts = encode_words(tokenizer, [words], 16 if readout == "last" else 30, stride=6, readout=readout)
    assert counts["extra_windows"] > 0
    scored = {}
    for row, flags in enumerate(rows["scored"]):
        held = [w for w in rows["word_ids"][row] if w >= 0]
        for position, flag in enumerate(flags):
            word = rows["word_ids"][row][position]
            if flag:
                assert word not in scored
                scored[word] = held.count(word)
    assert sorted(scored) == list(range(len(words)))
    assert all(scored[w] == pieces[w] for w in scored), "a word is scored in a window that cuts it"


def test_a_model_that_pools_sub_tokens_asks_for_word_ids_and_other_heads_refuse_a_readout(tiny_decoder):
    model = DWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=3, word_readout="mean").eval()
    batch = load_tokenizer(tiny_decoder)(["EU rejects German call"], return_tensors="pt")
    with pytest.raises(ValueError, match=r"reads each word as 'mean' \(config.word_readout\): give `word_ids`"):
        model(**batch)
    words = torch.tensor([[-1 if w is None else w for w in batch.word_ids(0)]])
    assert model(**batch, word_ids=words).logits.shape[:2] == batch["input_ids"].shape
    with pytest.raises(ValueError, match="word_readout 'last' is for token classification"):
        from dwatt import DWAttForSequenceClassification

        DWAttForSequenceClassification.from_backbone(str(tiny_decoder), num_labels=2, word_readout="last")
    with pytest.raises(ValueError, match="unknown word_readout 'middle'"):
        DWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=3, word_readout="middle")


def test_each_readout_names_its_repetition_and_pooling_once_and_encoding_refuses_an_unknown_one(tiny_decoder):
    assert [word_readout_parts(readout) for readout in WORD_READOUTS] == [
        (False, "first"),
        (False, "last"),
        (False, "mean"),
        (True, "last"),
        (True, "mean"),
    ]
    with pytest.raises(ValueError, match="unknown word readout 'echo-first'; expected one of first, last"):
        encode_words(load_tokenizer(tiny_decoder), SENTENCES, max_length=32, readout="echo-first")


@pytest.mark.parametrize("readout", [r for r in WORD_READOUTS if r != "first"])
def test_each_readout_trains_on_its_cache_and_the_checkpoint_scores_the_same_without_one(
    readout, tiny_decoder, tiny_conll, tmp_path, capsys
):
    out = tmp_path / "run"
    common = ["--backbone", str(tiny_decoder), "--data-dir", str(tiny_conll), "--word-readout", readout]
    train = ["train", *common, "--n-shot", "2", "--epochs", "2", "--batch-size", "4", "--lr", "5e-3"]
    assert main([*train, "--cache-dtype", "float32", "--output-dir", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["cached_features"] and results["config"]["word_readout"] == readout
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["word_readout"] == readout
    capsys.readouterr()
    # evaluate and predict run the saved model on the tokens (no cache): the same words read the same way
    assert main(["evaluate", str(out / "model"), "--data-dir", str(tiny_conll)]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(results["best_dev_f1"], abs=1e-6)
    assert main(["predict", str(out / "model"), "Peter Blackburn visited Brussels ."]) == 0
    assert capsys.readouterr().out.split()[::2] == ["Peter", "Blackburn", "visited", "Brussels", "."]


def test_lora_and_the_uncached_run_pad_word_ids_on_the_tokenizers_side(tiny_decoder, tiny_conll, tmp_path):
    for mode, extra in (("lora", []), ("fe", ["--no-cache"])):
        out = tmp_path / mode
        command = ["train", "--backbone", str(tiny_decoder), "--data-dir", str(tiny_conll), "--mode", mode, *extra]
        command += ["--word-readout", "echo-mean", "--n-shot", "2", "--epochs", "1", "--output-dir", str(out)]
        assert main(command) == 0
        assert json.loads((out / "results.json").read_text())["config"]["word_readout"] == "echo-mean"


@pytest.mark.parametrize("readout", ["echo-last", "mean"])
def test_onnx_takes_the_word_ids_and_tags_as_the_checkpoint_does_and_stock_export_refuses(
    readout, tiny_decoder, tmp_path, capsys
):
    torch.manual_seed(0)
    model = DWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=3, word_readout=readout)
    model.config.id2label = {0: "O", 1: "B-PER", 2: "I-PER"}
    model.save_pretrained(tmp_path / "model")
    load_tokenizer(tiny_decoder).save_pretrained(tmp_path / "model")
    assert f"reads each word as '{readout}'" in stock_refusal(model, "ner")
    sentence = "Peter Blackburn visited Brussels ."
    assert main(["predict", str(tmp_path / "model"), sentence]) == 0
    expected = capsys.readouterr().out
    assert main(["export", str(tmp_path / "model"), str(tmp_path / "onnx"), "--quantize", "int8"]) == 0
    export = json.loads((tmp_path / "onnx" / "dwatt_export.json").read_text())
    assert export["word_readout"] == readout and "word_ids" in export["inputs"]
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "onnx"), sentence]) == 0
    assert capsys.readouterr().out == expected
    assert main(["predict", str(tmp_path / "onnx"), sentence, "--quantize", "int8"]) == 0  # the int8 graph too
    assert capsys.readouterr().out.split()[::2] == sentence.split()
    assert main(["export", str(tmp_path / "model"), str(tmp_path / "stock"), "--format", "transformers"]) == 2
    assert f"no stock transformers model: it reads each word as '{readout}'" in capsys.readouterr().err


def test_the_readout_names_its_runs_probe_store_and_is_refused_where_no_word_is_read():
    ids = [
        spec.run_id for spec in grid(("base",), n_shots=(8,), epochs=(5,), trials=1, word_readouts=("first", "mean"))
    ]
    assert not ids[0].endswith("read-first") and ids[1].endswith("/read-mean")
    first, mean = ProbeSettings(word_readout="first"), ProbeSettings(word_readout="mean")
    assert "word_readout" not in first.question() and first.question_name() != mean.question_name()
    with pytest.raises(ValueError, match="a word readout is for tagging"):
        RunConfig(task="cls", word_readout="last").validate()
    with pytest.raises(ValueError, match="--word-readout: expected one of first, last"):
        ProbeSettings(word_readout="middle")
    with pytest.raises(ValueError, match="a word readout is for tagging"):
        grid(("base",), task="cls", n_shots=(8,), epochs=(5,), trials=1, word_readouts=("mean",))


def test_caches_of_other_readouts_never_meet(tiny_decoder):
    from datasets import Dataset

    from dwatt.training.run_caches import described_key, feature_key

    tokens = Dataset.from_dict({"input_ids": [[1, 2, 3]], "labels": [[0, -100, 1]]})
    keys = {}
    for readout in ("first", "last", "mean"):
        model = DWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=2, word_readout=readout)
        keys[readout] = feature_key(model, str(tiny_decoder), tokens, torch.float16)
    assert len({key[1] for key in keys.values()}) == 3
    assert described_key(keys["mean"])["word_readout"] == "mean" and "word_readout" not in described_key(keys["first"])


def test_heads_that_read_words_differently_share_no_backbone_pass_and_alike_ones_do(tiny_decoder, tmp_path, capsys):
    for name, readout in (("a", "mean"), ("b", "mean"), ("c", "last")):
        torch.manual_seed(0)
        model = DWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=3, word_readout=readout)
        model.save_pretrained(tmp_path / name, heads_only=True)
        load_tokenizer(tiny_decoder).save_pretrained(tmp_path / name)
    sentence = "Peter Blackburn visited Brussels ."
    assert main(["predict", str(tmp_path / "a"), sentence]) == 0
    alone = capsys.readouterr().out.split()[1::2]
    assert main(["predict", "--heads", f"{tmp_path / 'a'},{tmp_path / 'b'}", sentence]) == 0
    shared = [line.split() for line in capsys.readouterr().out.splitlines()[1:] if line.strip()]
    assert [row[1] for row in shared] == alone  # the shared pass reads words as each head alone does
    assert main(["predict", "--heads", f"{tmp_path / 'a'},{tmp_path / 'c'}", sentence]) == 2
    assert "do not share a backbone: word_readout 'mean' vs 'last'" in capsys.readouterr().err


def test_an_encoder_reads_its_words_as_the_mean_through_training_and_prediction(
    tiny_backbone, tiny_conll, tmp_path, capsys
):
    out = tmp_path / "run"
    command = ["train", "--backbone", str(tiny_backbone), "--data-dir", str(tiny_conll), "--word-readout", "mean"]
    command += ["--n-shot", "2", "--epochs", "2", "--cache-dtype", "float32", "--output-dir", str(out)]
    assert main(command) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["word_readout"] == "mean" and results["cached_features"]
    capsys.readouterr()
    assert main(["evaluate", str(out / "model"), "--data-dir", str(tiny_conll)]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(results["best_dev_f1"], abs=1e-6)
