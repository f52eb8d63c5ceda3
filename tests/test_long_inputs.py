"""Long and odd inputs: windows for over-long sentences, words without sub-tokens, empty sentences, Unicode,
and a single Trainer run resumed from its last checkpoint."""

import numpy as np
import pytest
from datasets import Dataset
from transformers import BertTokenizerFast

import dwatt.training
from dwatt import RobertaDWAttForTokenClassification
from dwatt.cli import main
from dwatt.data import CONLL_LABELS, ner_features, tokenize_and_align
from dwatt.metrics import NERMetrics, entity_scores, reassemble
from dwatt.serving.prediction import predict_tags
from dwatt.training import RunConfig, run_ner

TAGS = list(CONLL_LABELS)


def sentences_dataset(sentences: list[list[tuple[str, str]]]) -> Dataset:
    return Dataset.from_dict(
        {
            "id": list(range(len(sentences))),
            "tokens": [[w for w, _ in s] for s in sentences],
            "ner_tags": [[TAGS.index(t) for _, t in s] for s in sentences],
        },
        features=ner_features(TAGS),
    )


def long_sentence(length: int) -> list[tuple[str, str]]:
    cycle = [("peter", "B-PER"), ("blackburn", "I-PER"), ("rejects", "O"), ("brussels", "B-LOC"), ("eu", "B-ORG")]
    return [cycle[i % len(cycle)] for i in range(length)]


def scored_rows(tokenized) -> list[list[str]]:
    return [[TAGS[label] for label in row if label != -100] for row in tokenized["labels"]]


def test_a_2000_word_sentence_is_split_into_windows_and_every_word_scored_once(tiny_backbone, caplog):
    tokenizer = BertTokenizerFast.from_pretrained(tiny_backbone)
    words = long_sentence(2000)
    data = sentences_dataset([words[:7], words, words[:3]])
    with caplog.at_level("WARNING"):
        tokenized = tokenize_and_align(data, tokenizer, max_length=64, stride=16)
    assert "split 1 sentences longer than 64 sub-words into" in caplog.text and "(no label lost)" in caplog.text
    assert all(len(ids) <= 64 for ids in tokenized["input_ids"])
    windows = list(zip(tokenized["sentence"], tokenized["window"]))
    assert sorted(set(tokenized["sentence"])) == [0, 1, 2] and max(w for s, w in windows if s == 1) > 30
    rebuilt = reassemble(scored_rows(tokenized), windows)
    assert rebuilt == [[t for _, t in words[:7]], [t for _, t in words], [t for _, t in words[:3]]]


def test_entities_across_a_window_boundary_are_scored_on_the_whole_sentence(tiny_backbone):
    tokenizer = BertTokenizerFast.from_pretrained(tiny_backbone)
    data = sentences_dataset([long_sentence(300)])
    tokenized = tokenize_and_align(data, tokenizer, max_length=32, stride=8)
    windows = list(zip(tokenized["sentence"], tokenized["window"]))
    width = max(len(row) for row in tokenized["labels"])
    labels = np.full((len(tokenized), width), -100)
    for row, values in enumerate(tokenized["labels"]):
        labels[row, : len(values)] = values
    perfect = np.eye(len(TAGS))[np.where(labels < 0, 0, labels)]
    scores = NERMetrics(TAGS, windows)(type("EvalPrediction", (), {"predictions": perfect, "label_ids": labels})())
    reference = entity_scores([[t for _, t in long_sentence(300)]], [[t for _, t in long_sentence(300)]])
    assert scores["f1"] == 1.0 and scores["PER_support"] == reference["PER_support"] == 60


def test_words_without_sub_tokens_are_kept_as_unknown_and_empty_sentences_skipped(tiny_backbone, caplog):
    tokenizer = BertTokenizerFast.from_pretrained(tiny_backbone)
    data = sentences_dataset([[("peter", "B-PER"), ("\u200b", "O"), ("blackburn", "B-PER")], [], [("eu", "B-ORG")]])
    with caplog.at_level("WARNING"):
        tokenized = tokenize_and_align(data, tokenizer)
    assert "skipped 1 empty sentences" in caplog.text
    assert "encoded 1 words that have no sub-token as [UNK]" in caplog.text
    assert scored_rows(tokenized) == [["B-PER", "O", "B-PER"], ["B-ORG"]]


@pytest.fixture(scope="module")
def tiny_checkpoint(tiny_backbone, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-checkpoint")
    model = RobertaDWAttForTokenClassification.from_backbone(
        str(tiny_backbone), id2label=dict(enumerate(TAGS)), label2id={t: i for i, t in enumerate(TAGS)}
    )
    model.save_pretrained(folder)
    BertTokenizerFast.from_pretrained(tiny_backbone).save_pretrained(folder)
    return folder


def test_prediction_tags_every_word_of_a_sentence_longer_than_the_model(tiny_checkpoint, tmp_path, capsys):
    words = [w for w, _ in long_sentence(700)]  # 700 words + 2 specials > 512 positions
    (tmp_path / "long.txt").write_text(" ".join(words) + "\n\n")
    assert main(["predict", str(tiny_checkpoint), "--file", str(tmp_path / "long.txt")]) == 0
    captured = capsys.readouterr()
    tags, blank = captured.out.split("\n")[:2]  # a line of tags per input line, the blank one empty
    assert len(tags.split()) == len(words) and all(t in TAGS for t in tags.split()) and blank == ""
    assert captured.out.count("\n") == 2 and "1 blank lines, each given an empty record" in captured.err


@pytest.mark.real_weights
def test_arabic_cjk_and_emoji_round_trip_through_tokenisation_and_prediction(minilm_path):
    from dwatt.data import load_tokenizer

    tokenizer = load_tokenizer(minilm_path)
    model = RobertaDWAttForTokenClassification.from_backbone(
        str(minilm_path), id2label=dict(enumerate(TAGS)), label2id={t: i for i, t in enumerate(TAGS)}
    ).eval()
    sentences = [
        ["مرحبا", "بالعالم", "في", "القاهرة"],
        ["東京", "は", "日本", "の", "首都"],
        ["I", "❤️", "Paris", "🎉", "!"],
    ]
    tags = predict_tags(model, tokenizer, sentences)
    assert [len(t) for t in tags] == [len(s) for s in sentences] and all(t in TAGS for row in tags for t in row)
    data = sentences_dataset([[(w, "O") for w in s] for s in sentences])
    assert scored_rows(tokenize_and_align(data, tokenizer)) == [["O"] * len(s) for s in sentences]


def test_a_single_run_resumes_from_its_last_checkpoint(tiny_backbone, tiny_conll, tmp_path, monkeypatch):
    def config(folder, **kwargs):
        return RunConfig(
            backbone=str(tiny_backbone),
            data_dir=str(tiny_conll),
            n_shot=2,
            epochs=3,
            batch_size=4,
            learning_rate=5e-3,
            output_dir=str(tmp_path / folder),
            progress=False,
            save_model=False,
            cache_dtype="float32",
            **kwargs,
        )

    straight = run_ner(config("straight"))
    original_on_save = dwatt.training.BestDevCallback.on_save

    def crash_after_first_checkpoint(self, args, state, control, **kwargs):
        original_on_save(self, args, state, control, **kwargs)
        raise KeyboardInterrupt("simulated crash after epoch 1")

    monkeypatch.setattr(dwatt.training.BestDevCallback, "on_save", crash_after_first_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        run_ner(config("resumed", checkpoint_every_epoch=True))
    assert not (tmp_path / "resumed" / "results.json").exists()
    monkeypatch.setattr(dwatt.training.BestDevCallback, "on_save", original_on_save)
    resumed = run_ner(config("resumed", resume=True))
    assert resumed["resumed_from"] == "checkpoint-2"
    assert resumed["dev_curve"] == straight["dev_curve"] and len(resumed["dev_curve"]) == 3
    assert (
        resumed["best_dev_f1"] == straight["best_dev_f1"] and resumed["best_dev_scores"] == straight["best_dev_scores"]
    )
