"""Sentence classification: the model, its pooled FE cache, the data files, few-shot runs, reloading, the pipeline."""

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

from dwatt import FUSIONS, POOLINGS, RobertaDWAttForSequenceClassification
from dwatt.data.classification import (
    AG_NEWS_LABELS,
    DataFormatError,
    load_classification_dataset,
    read_classification_file,
    split_ag_news,
    tokenize_texts,
)
from dwatt.features import FeatureCollator, build_feature_cache
from dwatt.sampling import SamplingError, sample_examples_per_class
from dwatt.training.cls import cache_pooling

from .conftest import SHARED, WORDS, run_without_dwatt, tiny_config


def make_batch(padding: int = 0):
    torch.manual_seed(3)
    ids = torch.randint(5, 99, (3, 7))
    mask = torch.ones_like(ids)
    if padding:
        ids = torch.cat([ids, torch.full((3, padding), 1)], dim=1)
        mask = torch.cat([mask, torch.zeros(3, padding, dtype=torch.long)], dim=1)
    return ids, mask


@pytest.mark.parametrize("problem_type, labels, expected_loss", [
    ("single_label_classification", torch.tensor([0, 2, 1]), torch.nn.functional.cross_entropy),
    ("multi_label_classification", torch.tensor([[1.0, 0, 1], [0, 0, 1], [0, 1, 0]]),
     torch.nn.functional.binary_cross_entropy_with_logits),
    ("regression", torch.tensor([0.5, -1.0, 2.0]), None),
])
def test_problem_types_follow_transformers_and_are_inferred_from_the_labels(problem_type, labels, expected_loss):
    num_labels = 1 if problem_type == "regression" else 3
    model = RobertaDWAttForSequenceClassification(tiny_config("roberta", "dwatt", num_labels=num_labels)).eval()
    ids, mask = make_batch()
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert model.config.problem_type == problem_type and out.logits.shape == (3, num_labels)
    if expected_loss is None:
        expected = torch.nn.functional.mse_loss(out.logits.view(-1), labels)
    else:
        expected = expected_loss(out.logits, labels)
    torch.testing.assert_close(out.loss, expected)


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("fusion", FUSIONS)
def test_padding_does_not_change_a_sentence_and_only_pooled_positions_matter(fusion, pooling):
    model = RobertaDWAttForSequenceClassification(tiny_config("bert", fusion, num_labels=4, pooling=pooling)).eval()
    ids, mask = make_batch()
    padded_ids, padded_mask = make_batch(padding=5)
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).logits
        padded = model(input_ids=padded_ids, attention_mask=padded_mask).logits
        with torch.enable_grad():  # training mode's batched fusion path gives the same
            trained_path = model(input_ids=ids, attention_mask=mask).logits.detach()
    torch.testing.assert_close(padded, plain, atol=1e-5, rtol=0)
    torch.testing.assert_close(trained_path, plain, atol=1e-5, rtol=0)


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("fusion", FUSIONS)
def test_the_sentence_cache_pooled_where_exact_equals_the_uncached_model(fusion, pooling, tiny_backbone):
    from datasets import Dataset
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone)
    torch.manual_seed(0)
    model = RobertaDWAttForSequenceClassification.from_backbone(str(tiny_backbone), fusion=fusion, num_labels=3,
                                                                pooling=pooling).eval()
    texts = [" ".join(WORDS[i: i + 2 + i % 5]) for i in range(9)]
    data = Dataset.from_dict({"text": texts, "label": [i % 3 for i in range(9)]})
    tokens = tokenize_texts(data, tokenizer)
    pooled = cache_pooling(fusion, pooling)
    cache = build_feature_cache(model, tokens, dtype=torch.float32, progress=False, pooled=pooled)
    expected_rows = 1 if pooled else None
    assert all(length == (expected_rows or n) for length, n in zip(cache.lengths, map(len, tokens["input_ids"])))
    cached_batch = FeatureCollator()([cache[i] for i in range(len(cache))])
    assert cached_batch["labels"].tolist() == data["label"]
    padded = tokenizer.pad({"input_ids": tokens["input_ids"], "attention_mask": tokens["attention_mask"]}, return_tensors="pt")
    with torch.no_grad():
        uncached = model(**padded).logits
        cached = model(backbone_hidden_states=cached_batch["backbone_hidden_states"],
                       attention_mask=cached_batch["attention_mask"]).logits
    torch.testing.assert_close(cached, uncached, atol=1e-5, rtol=0)


def test_which_fusions_cache_one_vector_per_sentence():
    assert [cache_pooling(f, "mean") for f in ("base", "concat", "scalar_mix", "dwatt", "base_plus_n")] == [
        "mean", "mean", "mean", None, None]
    assert [cache_pooling(f, "first") for f in ("base", "concat", "scalar_mix", "dwatt", "base_plus_n")] == [
        "first"] * 4 + [None]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_tsv_and_jsonl_files_give_the_same_split_with_detected_or_named_columns(tmp_path):
    csv_file = write(tmp_path / "a.csv", 'sentence,label\n"good, really",pos\nbad,neg\n"two\nlines",pos\n')
    tsv_file = write(tmp_path / "a.tsv", "sentence\tlabel\ngood, really\tpos\nbad\tneg\n\"two\nlines\"\tpos\n")
    jsonl_file = write(tmp_path / "a.jsonl", "\n".join(json.dumps({"sentence": t, "label": l}) for t, l in
                                                       [("good, really", "pos"), ("bad", "neg"), ("two\nlines", "pos")]) + "\n")
    splits = [read_classification_file(path) for path in (csv_file, tsv_file, jsonl_file)]
    for split in splits:
        assert split["text"] == ["good, really", "bad", "two\nlines"]
        assert split.features["label"].names == ["neg", "pos"] and split["label"] == [1, 0, 1]
    named = read_classification_file(write(tmp_path / "b.csv", "q,a,y\nhow?,well,1\nwhy?,so,0\n"),
                                      text_column="q", pair_column="a", label_column="y")
    assert named["text_pair"] == ["well", "so"] and named.features["label"].names == ["0", "1"]


@pytest.mark.parametrize("name, content, message", [
    ("fields.csv", "text,label\nfine,a\ntoo,many,fields\n", r"fields\.csv:3: 3 fields where the header has 2"),
    ("quote.csv", 'text,label\n"never closed,a\n', r"quote\.csv:2: a quoted field is never closed"),
    ("empty.csv", "text,label\nfine,a\n,b\n", r"empty\.csv:3: empty or missing 'text'"),
    ("nolabel.csv", "text,stars\nfine,a\n", r"nolabel\.csv: cannot tell which column is the label .*--label-column"),
    ("bad.jsonl", '{"text": "a", "label": "x"}\n{"text": "b", "label"\n', r"bad\.jsonl:2: not a JSON object"),
    ("list.jsonl", '["a", "x"]\n', r"list\.jsonl:1: expected a JSON object per line"),
    ("header.csv", "text,text\na,b\n", r"header\.csv:1: the header needs distinct"),
    ("rows.txt", "text,label\n", r"rows\.txt: unknown format '\.txt'"),
])
def test_a_malformed_file_names_the_file_and_line(tmp_path, name, content, message):
    with pytest.raises(DataFormatError, match=message):
        read_classification_file(write(tmp_path / name, content))


def test_validation_labels_missing_from_train_are_added_after_train_s(tmp_path):
    write(tmp_path / "train.csv", "text,label\na,x\nb,y\n")
    write(tmp_path / "dev.jsonl", json.dumps({"text": "c", "label": "z"}) + "\n")
    data = load_classification_dataset("unused", str(tmp_path))
    assert data["train"].features["label"].names == data["validation"].features["label"].names == ["x", "y", "z"]
    assert data["validation"]["label"] == [2]
    with pytest.raises(FileNotFoundError, match="expected train and validation"):
        load_classification_dataset("unused", str(tmp_path / "missing"))


# ../shared/data/SOURCES.md: the standard AG News test split, copied unchanged.
AG_NEWS_SOURCE_SHA256 = "72b844642f92fb74fe397f0d1dd8a46d4cfd6fff60bc5c1a214fe40c44708fd7"


def test_the_vendored_ag_news_split_is_the_seeded_per_class_split_of_the_shared_test_file(tmp_path):
    data = load_classification_dataset("ag_news")
    assert data["train"].features["label"].names == list(AG_NEWS_LABELS)
    assert (len(data["train"]), len(data["validation"])) == (5600, 2000)
    for split, per_class in (("train", 1400), ("validation", 500)):
        assert sorted(data[split]["label"]).count(0) == per_class and set(data[split]["label"]) == {0, 1, 2, 3}
    assert "text_pair" in data["train"].column_names  # title, description
    source = SHARED / "data" / "ag_news" / "test.csv"
    if not source.exists():
        # The source is the project's shared data, laid beside every checkout and beside CI's clone; a user's clone
        # has none, so the check is skipped there, never in CI.
        if os.environ.get("CI"):
            pytest.fail(f"CI runs without {source}: the vendored AG News split cannot be checked against its source")
        pytest.skip("../shared/data/ag_news is not here (a user's clone): the split is checked in CI")
    assert hashlib.sha256(source.read_bytes()).hexdigest() == AG_NEWS_SOURCE_SHA256
    assert split_ag_news(source, tmp_path) == {"train": 5600, "validation": 2000}
    vendored = Path(__file__).resolve().parents[1] / "dwatt" / "resources" / "ag_news"
    for name in ("train.csv", "validation.csv"):
        assert (tmp_path / name).read_bytes() == (vendored / name).read_bytes(), name


def test_n_examples_per_class_are_drawn_exactly_and_reproducibly():
    labels = [i % 3 for i in range(30)] + [3] * 2
    chosen = sample_examples_per_class(labels, 2, seed=7)
    assert [labels[i] for i in chosen].count(0) == 2 and len(chosen) == 8
    assert chosen == sample_examples_per_class(labels, 2, seed=7) != sample_examples_per_class(labels, 2, seed=8)
    with pytest.raises(SamplingError, match="class 3 has 2 examples; cannot sample 3"):
        sample_examples_per_class(labels, 3, seed=0)


@pytest.fixture(scope="module")
def tiny_topics(tmp_path_factory):
    """A tiny topic-classification folder in the tiny backbone's vocabulary: train.csv and dev.csv."""
    folder = tmp_path_factory.mktemp("topics")
    topics = {"people": WORDS[8:10] + ["call"], "places": ["brussels", "british", "german"], "food": ["lamb", "boycott", "to"]}
    rows = [(" ".join(words[(i + j) % 3] for j in range(3 + i % 2)), topic) for topic, words in topics.items() for i in range(6)]
    write(folder / "train.csv", "text,label\n" + "".join(f"{t},{label}\n" for t, label in rows))
    write(folder / "dev.csv", "text,label\n" + "".join(f"{t},{label}\n" for t, label in rows[::2]))
    return folder


def test_cli_classification_train_evaluate_predict_and_the_checkpoint_reloads_without_dwatt(tiny_backbone, tiny_topics, tmp_path, capsys):
    from dwatt.cli import main

    out = tmp_path / "run"
    assert main(["train", "--task", "cls", "--backbone", str(tiny_backbone), "--data-dir", str(tiny_topics), "--n-shot", "3",
                 "--epochs", "3", "--batch-size", "4", "--lr", "5e-3", "--output-dir", str(out), "--cache-dtype", "float32"]) == 0
    printed = capsys.readouterr().out
    assert "best dev accuracy" in printed and "all (macro)" in printed and "dwatt predict" in printed
    results = json.loads((out / "results.json").read_text())
    assert results["task"] == "cls" and results["num_train_examples"] == 9 and results["cached_features"] == "tokens"
    assert results["labels"] == ["food", "people", "places"] and len(results["dev_curve"]) == 3
    assert main(["evaluate", str(out / "model"), "--data-dir", str(tiny_topics)]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["accuracy"] == pytest.approx(results["best_dev_accuracy"], abs=1e-6)
    assert scored["macro_f1"] == pytest.approx(results["best_dev_macro_f1"], abs=1e-6)
    assert main(["predict", str(out / "model"), "peter blackburn call", "--jsonl", str(write(tmp_path / "in.txt", "lamb to\n"))]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["text"] for line in lines] == ["peter blackburn call", "lamb to"]
    assert all(set(line["scores"]) == {"food", "people", "places"} for line in lines)
    run_without_dwatt(
        f"""
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline
        path = {str(out / "model")!r}
        model = AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=True).eval()
        assert type(model).__name__ == "RobertaDWAttForSequenceClassification", type(model)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        classify = pipeline("text-classification", model=path, tokenizer=tokenizer, trust_remote_code=True)
        best = classify("peter blackburn call")[0]
        assert best["label"] in ("food", "people", "places") and 0 < best["score"] <= 1, best
        logits = model(**tokenizer("peter blackburn call", return_tensors="pt")).logits
        assert abs(torch.softmax(logits, -1).max().item() - best["score"]) < 1e-5
        """,
        tmp_path,
    )


def test_test_on_data_without_a_test_split_scores_the_dev_examples_outside_the_dev_subset(tiny_backbone, tiny_topics, tmp_path):
    """With --dev-sentences below the dev split's size, test is the rest of the split: every dev example is in
    exactly one of the two, and no choice is made on test."""
    from datasets import Dataset

    from dwatt.training import RunConfig, run
    from dwatt.training.common import dev_held_out, dev_subset

    config = RunConfig(task="cls", backbone=str(tiny_backbone), data_dir=str(tiny_topics), n_shot=3, epochs=1,
                       dev_sentences=5, evaluate_test=True, output_dir=str(tmp_path / "run"), progress=False,
                       save_model=False)
    results = run(config)
    assert results["num_dev_examples"] == 5 and results["num_test_examples"] == 4 and "accuracy" in results["test_scores"]
    split = Dataset.from_dict({"i": list(range(9))})
    dev, test = list(dev_subset(split, config)["i"]), list(dev_held_out(split, config)["i"])
    assert sorted(dev + test) == list(range(9)) and test == sorted(test)
    assert dev_held_out(split, RunConfig(task="cls", dev_sentences=9)) is None


def together_config(backbone, topics, folder, **kwargs):
    from dwatt.training import RunConfig

    defaults = dict(task="cls", backbone=str(backbone), data_dir=str(topics), n_shot=3, epochs=3, batch_size=4,
                    dev_sentences=5, evaluate_test=True, output_dir=str(folder), progress=False, cache_dtype="float32",
                    save_model=True)
    return RunConfig(**(defaults | kwargs))


def head_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v for k, v in load_file(str(folder / "model" / "model.safetensors")).items() if "backbone" not in k}


@pytest.mark.parametrize("vectorize", [False, True], ids=["one-after-another", "vmap"])
@pytest.mark.parametrize("fusion", ["base", "scalar_mix", "dwatt"])
def test_classification_runs_trained_together_end_as_each_alone(fusion, vectorize, tiny_backbone, tiny_topics, tmp_path):
    """Text classification on the budgets engine: heads on each layer at two rates (a probe, pooled one-vector
    caches), or budgets at two rates of a fusion (DWAtt's cache holds every token), trained together as stacked
    copies, each end as that run alone: dev curve, test scores and weights."""
    from dwatt.training import run_together

    if fusion == "base":
        runs = [dict(layers=layer, learning_rate=rate, epochs=2) for layer in ("1", "2", "3") for rate in (5e-3, 5e-2)]
    else:
        runs = [dict(epochs=epochs, learning_rate=rate) for epochs in (1, 3) for rate in (5e-3, 5e-2)]
    name = lambda run: "-".join(str(value) for value in run.values())
    make = lambda run, where: together_config(tiny_backbone, tiny_topics, tmp_path / where / name(run), fusion=fusion, **run)
    together = run_together([make(run, "together") for run in runs], vectorize=vectorize)
    curves = set()
    for run, joint in zip(runs, together):
        (alone,) = run_together([make(run, "alone")], vectorize=vectorize)
        assert joint["engine"] == "budgets" and joint["trained_together_runs"] == len(runs)
        assert joint["dev_curve"] == alone["dev_curve"] and len(joint["dev_curve"]) == run["epochs"]
        assert joint["test_scores"] == pytest.approx(alone["test_scores"], abs=1e-12) and joint["num_test_examples"] == 4
        mine, theirs = head_weights(tmp_path / "together" / name(run)), head_weights(tmp_path / "alone" / name(run))
        assert mine.keys() == theirs.keys() and mine
        for key in theirs:
            torch.testing.assert_close(mine[key], theirs[key], rtol=0, atol=1e-6, msg=key)
        curves.add(tuple(float(t.flatten()[0]) for t in mine.values()))
    assert len(curves) == len(runs)  # every copy went its own way


def test_a_classification_run_chooses_on_a_few_shot_dev_sample_too(tiny_backbone, tiny_topics, tmp_path):
    """few_shot_dev on text classification: the runs' own numbers stay; each also chooses its epoch on a dev sample
    of as many texts as it trained on, and that choice is scored on test."""
    from dwatt.training import run, run_together

    made = lambda sampled, where: [together_config(tiny_backbone, tiny_topics, tmp_path / where / str(rate), fusion="concat",
                                                   learning_rate=rate, epochs=4, few_shot_dev=sampled, save_model=False)
                                   for rate in (5e-3, 5e-2)]
    for plain, sampled in zip(run_together(made(False, "plain")), run_together(made(True, "sampled"))):
        assert [p["accuracy"] for p in sampled["dev_curve"]] == [p["accuracy"] for p in plain["dev_curve"]]
        assert sampled["test_scores"] == pytest.approx(plain["test_scores"]) and "few_shot_dev" not in plain
        chosen, curve = sampled["few_shot_dev"], [p["sample_accuracy"] for p in sampled["dev_curve"]]
        assert chosen["texts"] == sampled["num_train_examples"] == 9  # asked for; the 5 dev texts are all there is
        assert chosen["best_accuracy"] == max(curve) and "accuracy" in chosen["test_scores"]
        assert chosen["best_epoch"] == sampled["dev_curve"][curve.index(max(curve))]["epoch"]
        assert sampled["last_epoch"]["epoch"] == 4 and "last_epoch" not in plain
        if sampled["best_epoch"] == 4:
            assert sampled["last_epoch"]["test_scores"] == pytest.approx(sampled["test_scores"], abs=1e-12)
    # one epoch: the last epoch is the chosen one, its weights and test scores the run's own
    (single,) = run_together([together_config(tiny_backbone, tiny_topics, tmp_path / "one", fusion="concat", epochs=1,
                                              few_shot_dev=True, save_model=False)])
    assert single["last_epoch"] == {"epoch": 1, "test_scores": pytest.approx(single["test_scores"], abs=1e-12)}
    with pytest.raises(ValueError, match="few_shot_dev: the choice on a few-shot dev sample is made by runs trained together"):
        run(made(True, "trainer")[0])


@pytest.mark.parametrize("vendored", [False, True], ids=["folder", "vendored-ag-news"])
def test_test_on_data_without_a_test_split_is_refused_before_training(vendored, tiny_backbone, tiny_topics, tmp_path, capsys):
    from dwatt.cli import main

    out = tmp_path / "run"
    data = [] if vendored else ["--data-dir", str(tiny_topics)]
    code = main(["train", "--task", "cls", "--backbone", str(tiny_backbone), *data, "--n-shot", "3", "--epochs", "1",
                 "--output-dir", str(out), "--test"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "--test" in err and "no test split, only train and validation" in err
    assert ("ag_news" in err and "vendored" in err) if vendored else str(tiny_topics) in err
    assert not (out / "results.json").exists()


@pytest.mark.parametrize("fusion", ["dwatt", "concat"])
def test_head_only_classification_checkpoints_reload_through_remote_code(fusion, tiny_backbone, tmp_path):
    model = RobertaDWAttForSequenceClassification.from_backbone(str(tiny_backbone), fusion=fusion, num_labels=3).eval()
    model.save_pretrained(tmp_path / "head", heads_only=True)
    ids, mask = make_batch()
    ids = ids % 16
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits
    torch.save({"ids": ids, "mask": mask, "expected": expected}, tmp_path / "batch.pt")
    run_without_dwatt(
        f"""
        import torch
        from transformers import AutoModelForSequenceClassification
        model = AutoModelForSequenceClassification.from_pretrained({str(tmp_path / "head")!r}, trust_remote_code=True).eval()
        batch = torch.load({str(tmp_path / "batch.pt")!r})
        with torch.no_grad():
            logits = model(input_ids=batch["ids"], attention_mask=batch["mask"]).logits
        assert torch.allclose(logits, batch["expected"], atol=1e-5), (logits - batch["expected"]).abs().max()
        """,
        tmp_path,
    )


def test_classification_rows_make_tables_and_a_figure(tmp_path):
    from dwatt.experiment.report import write_report

    rows = []
    for trial in range(2):
        for fusion, gain in (("base", 0.0), ("dwatt", 0.1)):
            for n in (4, 16):
                rows.append({"task": "cls", "seed": trial, "config": {"backbone": "/m/small", "fusion": fusion, "mode": "fe",
                             "dataset": "ag_news", "n_shot": n, "epochs": 10, "task": "cls", "seed": trial},
                             "best_dev_accuracy": 0.5 + gain + n / 100 + trial / 100, "best_dev_macro_f1": 0.4 + gain,
                             "best_epoch": 10, "dev_curve": [{"epoch": 10, "step": 10, "accuracy": 0.5}]})
    store = write(tmp_path / "results.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    report = write_report([store], tmp_path / "report").read_text()
    assert "## Text classification, ag_news, small, FE: accuracy" in report and "macro-F1" in report
    assert "| N=16, 10 epochs | 66.50 ± 6.35 | 76.50 ± 6.35 |" in report
    assert (tmp_path / "report" / "figures" / "text_classification.png").exists()
    assert (tmp_path / "report" / "tables" / "classification_summary.csv").exists()


def test_a_classification_head_shares_a_backbone_with_a_tagger_and_its_model_card_says_text_classification(tiny_backbone, tmp_path):
    from dwatt import DWAttForTokenClassification, SharedBackboneHeads
    from dwatt.hub import model_card

    classifier = RobertaDWAttForSequenceClassification.from_backbone(str(tiny_backbone), fusion="dwatt", num_labels=3).eval()
    tagger = DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="concat", num_labels=5).eval()
    classifier.save_pretrained(tmp_path / "topics", heads_only=True)
    tagger.save_pretrained(tmp_path / "tags", heads_only=True)
    heads = SharedBackboneHeads.from_pretrained([str(tmp_path / "topics"), str(tmp_path / "tags")])
    ids, mask = make_batch()
    ids = ids % 16
    with torch.no_grad():
        outputs = heads(input_ids=ids, attention_mask=mask)
        torch.testing.assert_close(outputs["topics"].logits, classifier(input_ids=ids, attention_mask=mask).logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(outputs["tags"].logits, tagger(input_ids=ids, attention_mask=mask).logits, atol=1e-5, rtol=0)
    results = {"config": {"dataset": "ag_news", "mode": "fe", "n_shot": 4, "epochs": 50}, "num_train_examples": 16, "seed": 0,
               "best_dev_accuracy": 0.8, "best_dev_macro_f1": 0.75, "best_epoch": 30}
    card = model_card(classifier, results, repo_id="me/topics")
    assert "pipeline_tag: text-classification" in card and "AutoModelForSequenceClassification" in card
    assert "| accuracy | 80.00 |" in card and "| f1 | 75.00 |" in card and "16 training examples" in card


def unseen_label_folder(root: Path, suffix: str) -> Path:
    """train has x and y; validation has one row labelled z, on its 3rd line for every format."""
    rows = {"train": [("peter call", "x"), ("brussels lamb", "y"), ("peter to", "x"), ("german lamb", "y")],
            "validation": [("peter boycott", "x"), ("british call", "z"), ("lamb to", "y")]}
    root.mkdir(parents=True, exist_ok=True)
    for split, items in rows.items():
        if suffix == ".jsonl":  # a blank first line (skipped) in place of the header, so rows sit on the same lines
            text = "\n" + "".join(json.dumps({"text": t, "label": label}) + "\n" for t, label in items)
        else:
            sep = "," if suffix == ".csv" else "\t"
            text = f"text{sep}label\n" + "".join(f"{t}{sep}{label}\n" for t, label in items)
        write(root / f"{split}{suffix}", text)
    return root


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_an_evaluation_label_absent_from_training_is_named_with_its_file_line_and_count(suffix, tiny_backbone, tmp_path, caplog,
                                                                                       capsys):
    from dwatt.training import RunConfig, run_classification

    folder = unseen_label_folder(tmp_path / "data", suffix)
    config = RunConfig(backbone=str(tiny_backbone), task="cls", data_dir=str(folder), n_shot=None, epochs=1,
                       batch_size=4, output_dir=str(tmp_path / "run"), progress=False)
    with caplog.at_level("WARNING", logger="dwatt.data.classification"):
        results = run_classification(config)
    warnings = [r.getMessage() for r in caplog.records if "absent from" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"{folder / ('validation' + suffix)}:3: the label 'z' (1 in validation) is absent "
                                  "from the training split")
    # Scoring stays honest: the row is kept (3 scored, z among the classes with its support) and counts as an error.
    assert results["num_dev_examples"] == 3 and results["labels"] == ["x", "y", "z"]
    assert results["best_dev_scores"]["z_support"] == 1 and results["best_dev_scores"]["z_recall"] == 0
    assert results["best_dev_accuracy"] <= 2 / 3
    assert results["unseen_labels"] == {"z": {"validation": 1}}
    # `dwatt evaluate` scores the checkpoint (classes x, y) on the same split the same way, with the same warning.
    from dwatt.cli import main

    caplog.clear()
    with caplog.at_level("WARNING", logger="dwatt.data.classification"):
        assert main(["evaluate", str(tmp_path / "run" / "model"), "--data-dir", str(folder)]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["examples"] == 3 and scored["accuracy"] == pytest.approx(results["best_dev_accuracy"])
    assert scored["z_support"] == 1 and scored["z_f1"] == 0
    assert [r.getMessage().split(": ", 1)[1][:41] for r in caplog.records] == ["the label 'z' (1 in validation) is absent"]


def test_a_sampled_n_that_misses_a_class_warns_once_per_label(tiny_backbone, tmp_path, caplog, monkeypatch):
    from dwatt.training import RunConfig
    from dwatt.training.cls import prepare_classification

    folder = unseen_label_folder(tmp_path / "data", ".csv")
    write(folder / "train.csv", "text,label\npeter call,x\nbrussels lamb,y\npeter to,x\ngerman lamb,y\nto call,w\nlamb,w\n")
    write(folder / "validation.csv", "text,label\npeter boycott,x\nbritish call,y\nlamb to,y\nbrussels,z\n")
    # A sampler that misses class y (and the training file has no z at all); classes: w 0, x 1, y 2, z 3.
    monkeypatch.setattr("dwatt.training.cls.sample_examples_per_class",
                        lambda labels, n, seed: [i for i, label in enumerate(labels) if label != 2])
    config = RunConfig(backbone=str(tiny_backbone), task="cls", data_dir=str(folder), n_shot=2, seed=3, epochs=1,
                       output_dir=str(tmp_path / "run"), save_model=False, progress=False)
    with caplog.at_level("WARNING", logger="dwatt.data.classification"):
        setup = prepare_classification(config)
    warnings = sorted(r.getMessage() for r in caplog.records if "absent from" in r.getMessage())
    assert warnings == [
        f"{folder / 'validation.csv'}:3: the label 'y' (2 in validation) is absent from the training sample (2 per "
        "class, seed 3); its rows stay in the scores and count as errors (the model never sees an example of it)",
        f"{folder / 'validation.csv'}:5: the label 'z' (1 in validation) is absent from the training sample (2 per "
        "class, seed 3); its rows stay in the scores and count as errors (the model never sees an example of it)",
    ]
    assert setup.unseen_labels == {"y": {"validation": 2}, "z": {"validation": 1}} and len(setup.dev) == 4
    assert setup.model.config.id2label == {0: "w", 1: "x"}  # the model knows only the classes it is trained on
    assert sorted(setup.dev_set[i]["labels"].item() for i in range(4)) == [-100, -100, -100, 1]
    monkeypatch.setattr("dwatt.training.cls.sample_examples_per_class",
                        lambda labels, n, seed: [i for i, label in enumerate(labels) if label == 1])
    with pytest.raises(ValueError, match=r"the training sample \(2 per class, seed 3\) holds one class \('x'\)"):
        prepare_classification(config)


def test_dwatt_probe_on_the_users_own_classification_files_reads_one_cache_and_saves_the_chosen_head(tiny_backbone, tiny_topics, tmp_path, capsys):
    """A probe for text classification on TSV files with columns of the user's naming: each head on one layer, read
    out of one cache of every layer, scores what that head trained alone scores; the chosen head is saved cut at its
    layer and `dwatt predict` runs it."""
    from dwatt.cli import main

    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.csv", "dev.csv"):
        lines = (tiny_topics / name).read_text().splitlines()
        write(data / name.replace(".csv", ".tsv"), "sentence\ttopic\n" + "".join(line.replace(",", "\t") + "\n" for line in lines[1:]))
    options = ["--task", "cls", "--backbone", str(tiny_backbone), "--data-dir", str(data), "--text-column", "sentence",
               "--label-column", "topic", "--n-shot", "3", "--epochs", "3", "--cache-dtype", "float32"]
    results = tmp_path / "probe" / "results.jsonl"
    assert main(["probe", *options, "--learning-rates", "5e-3,5e-2", "--results", str(results), "--quiet"]) == 0
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == 3 * 2 and {row["config"]["layers"] for row in rows} == {"1", "2", "3"}
    assert printed.splitlines()[0].startswith("dev accuracy by layer and learning rate")
    best = max(rows, key=lambda r: (r["best_dev_accuracy"], -int(r["config"]["layers"]), -r["config"]["learning_rate"]))
    layer, rate = best["config"]["layers"], best["config"]["learning_rate"]
    assert f"chosen on dev: layer {layer} of 3 at learning rate {rate:g}: dev accuracy {100 * best['best_dev_accuracy']:.2f}" in printed
    probed = next(row for row in rows if row["config"]["layers"] == "1" and row["config"]["learning_rate"] == 5e-2)
    from dwatt.training import RunConfig, run_together

    alone = RunConfig(**(probed["config"] | {"output_dir": str(tmp_path / "alone"), "save_model": False,
                                             "backbone": str(tiny_backbone), "data_dir": str(data)}))
    (trained,) = run_together([alone])
    assert probed["engine"] == "budgets" and trained["dev_curve"] == probed["dev_curve"]
    model = tmp_path / "probe" / "chosen" / "model"
    assert (tmp_path / "probe" / "probe.png").is_file() and f"model: {model}" in printed
    capsys.readouterr()
    assert main(["predict", str(model), "lamb to boycott"]) == 0
    assert capsys.readouterr().out.strip()


def test_dwatt_probe_for_classification_on_a_decoder_pools_the_last_token_and_saves_a_cut_head(tiny_decoder, tiny_topics, tmp_path, capsys):
    from dwatt.cli import main

    results = tmp_path / "probe" / "results.jsonl"
    assert main(["probe", "--task", "cls", "--backbone", str(tiny_decoder), "--data-dir", str(tiny_topics), "--n-shot", "3",
                 "--epochs", "2", "--learning-rates", "5e-2", "--layers", "1,2", "--trials", "2", "--results", str(results),
                 "--quiet"]) == 0
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == 2 * 2 and {row["pooling"] for row in rows} == {"last"}
    assert "each trial's own choice: layer" in printed
    model = RobertaDWAttForSequenceClassification.from_pretrained(tmp_path / "probe" / "chosen" / "model")
    assert model.dwatt.is_cut and model.dwatt.backbone.config.num_hidden_layers == model.config.read_layer
