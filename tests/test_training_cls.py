"""Classification runs (dwatt.training.cls): the sentence cache pooled where that is exact, runs trained together ending
as each alone, the few-shot dev choice, test scores where the data has no test split, labels missing from training."""

import json
from pathlib import Path

import pytest
import torch

from dwatt import FUSIONS, POOLINGS, RobertaDWAttForSequenceClassification
from dwatt.data.classification import tokenize_texts
from dwatt.features.build import build_feature_cache
from dwatt.features.cache import FeatureCollator
from dwatt.training.cls import cache_pooling

from .conftest import WORDS
from .helpers import write


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("fusion", FUSIONS)
def test_the_sentence_cache_pooled_where_exact_equals_the_uncached_model(fusion, pooling, tiny_backbone):
    from datasets import Dataset
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone)
    torch.manual_seed(0)
    model = RobertaDWAttForSequenceClassification.from_backbone(
        str(tiny_backbone), fusion=fusion, num_labels=3, pooling=pooling
    ).eval()
    texts = [" ".join(WORDS[i : i + 2 + i % 5]) for i in range(9)]
    data = Dataset.from_dict({"text": texts, "label": [i % 3 for i in range(9)]})
    tokens = tokenize_texts(data, tokenizer)
    pooled = cache_pooling(fusion, pooling)
    cache = build_feature_cache(model, tokens, dtype=torch.float32, progress=False, pooled=pooled)
    expected_rows = 1 if pooled else None
    assert all(length == (expected_rows or n) for length, n in zip(cache.lengths, map(len, tokens["input_ids"])))
    cached_batch = FeatureCollator()([cache[i] for i in range(len(cache))])
    assert cached_batch["labels"].tolist() == data["label"]
    padded = tokenizer.pad(
        {"input_ids": tokens["input_ids"], "attention_mask": tokens["attention_mask"]}, return_tensors="pt"
    )
    with torch.no_grad():
        uncached = model(**padded).logits
        cached = model(
            backbone_hidden_states=cached_batch["backbone_hidden_states"],
            attention_mask=cached_batch["attention_mask"],
        ).logits
    torch.testing.assert_close(cached, uncached, atol=1e-5, rtol=0)


def test_which_fusions_cache_one_vector_per_sentence():
    assert [cache_pooling(f, "mean") for f in ("base", "concat", "scalar_mix", "dwatt", "base_plus_n")] == [
        "mean",
        "mean",
        "mean",
        None,
        None,
    ]
    assert [cache_pooling(f, "first") for f in ("base", "concat", "scalar_mix", "dwatt", "base_plus_n")] == [
        "first"
    ] * 4 + [None]


def together_config(backbone, topics, folder, **kwargs):
    from dwatt.training import RunConfig

    defaults = dict(
        task="cls",
        backbone=str(backbone),
        data_dir=str(topics),
        n_shot=3,
        epochs=3,
        batch_size=4,
        dev_sentences=5,
        evaluate_test=True,
        output_dir=str(folder),
        progress=False,
        cache_dtype="float32",
        save_model=True,
    )
    return RunConfig(**(defaults | kwargs))


def head_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v for k, v in load_file(str(folder / "model" / "model.safetensors")).items() if "backbone" not in k}


@pytest.mark.parametrize("vectorize", [False, True], ids=["one-after-another", "vmap"])
@pytest.mark.parametrize("fusion", ["base", "scalar_mix", "dwatt"])
def test_classification_runs_trained_together_end_as_each_alone(
    fusion, vectorize, tiny_backbone, tiny_topics, tmp_path
):
    """Text classification on the budgets engine: heads on each layer at two rates (a probe, pooled one-vector
    caches), or budgets at two rates of a fusion (DWAtt's cache holds every token), trained together as stacked
    copies, each end as that run alone: dev curve, test scores and weights."""
    from dwatt.training import run_together

    if fusion == "base":
        runs = [dict(layers=layer, learning_rate=rate, epochs=2) for layer in ("1", "2", "3") for rate in (5e-3, 5e-2)]
    else:
        runs = [dict(epochs=epochs, learning_rate=rate) for epochs in (1, 3) for rate in (5e-3, 5e-2)]
    name = lambda run: "-".join(str(value) for value in run.values())
    make = lambda run, where: together_config(
        tiny_backbone, tiny_topics, tmp_path / where / name(run), fusion=fusion, **run
    )
    together = run_together([make(run, "together") for run in runs], vectorize=vectorize)
    curves = set()
    for run, joint in zip(runs, together):
        (alone,) = run_together([make(run, "alone")], vectorize=vectorize)
        assert joint["engine"] == "stacked" and joint["trained_together_runs"] == len(runs)
        assert joint["dev_curve"] == alone["dev_curve"] and len(joint["dev_curve"]) == run["epochs"]
        assert (
            joint["test_scores"] == pytest.approx(alone["test_scores"], abs=1e-12) and joint["num_test_examples"] == 4
        )
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

    made = lambda sampled, where: [
        together_config(
            tiny_backbone,
            tiny_topics,
            tmp_path / where / str(rate),
            fusion="concat",
            learning_rate=rate,
            epochs=4,
            few_shot_dev=sampled,
            save_model=False,
        )
        for rate in (5e-3, 5e-2)
    ]
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
    (single,) = run_together(
        [
            together_config(
                tiny_backbone,
                tiny_topics,
                tmp_path / "one",
                fusion="concat",
                epochs=1,
                few_shot_dev=True,
                save_model=False,
            )
        ]
    )
    assert single["last_epoch"] == {"epoch": 1, "test_scores": pytest.approx(single["test_scores"], abs=1e-12)}
    with pytest.raises(
        ValueError, match="few_shot_dev: the choice on a few-shot dev sample is made by runs trained together"
    ):
        run(made(True, "trainer")[0])


@pytest.mark.parametrize("vendored", [False, True], ids=["folder", "vendored-ag-news"])
def test_test_on_data_without_a_test_split_is_refused_before_training(
    vendored, tiny_backbone, tiny_topics, tmp_path, capsys
):
    from dwatt.cli import main

    out = tmp_path / "run"
    data = [] if vendored else ["--data-dir", str(tiny_topics)]
    code = main(
        [
            "train",
            "--task",
            "cls",
            "--backbone",
            str(tiny_backbone),
            *data,
            "--n-shot",
            "3",
            "--epochs",
            "1",
            "--output-dir",
            str(out),
            "--test",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "--test" in err and "no test split, only train and validation" in err
    assert ("ag_news" in err and "vendored" in err) if vendored else str(tiny_topics) in err
    assert not (out / "results.json").exists()


def unseen_label_folder(root: Path, suffix: str) -> Path:
    """train has x and y; validation has one row labelled z, on its 3rd line for every format."""
    rows = {
        "train": [("peter call", "x"), ("brussels lamb", "y"), ("peter to", "x"), ("german lamb", "y")],
        "validation": [("peter boycott", "x"), ("british call", "z"), ("lamb to", "y")],
    }
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
def test_an_evaluation_label_absent_from_training_is_named_with_its_file_line_and_count(
    suffix, tiny_backbone, tmp_path, caplog, capsys
):
    from dwatt.training import RunConfig, run_classification

    folder = unseen_label_folder(tmp_path / "data", suffix)
    config = RunConfig(
        backbone=str(tiny_backbone),
        task="cls",
        data_dir=str(folder),
        n_shot=None,
        epochs=1,
        batch_size=4,
        output_dir=str(tmp_path / "run"),
        progress=False,
    )
    with caplog.at_level("WARNING", logger="dwatt.data.classification"):
        results = run_classification(config)
    warnings = [r.getMessage() for r in caplog.records if "absent from" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        f"{folder / ('validation' + suffix)}:3: the label 'z' (1 in validation) is absent from the training split"
    )
    # Scoring stays honest: the row is kept (3 scored, z among the classes with its support) and counts as an error.
    assert results["num_dev_examples"] == 3 and results["labels"] == ["x", "y", "z"]
    assert results["best_dev_scores"]["z_support"] == 1 and results["best_dev_scores"]["z_recall"] == 0
    assert results["best_dev_accuracy"] <= 2 / 3
    assert results["unseen_labels"] == {"z": {"validation": 1}}
    from dwatt.console import console_of

    said = "labels no training example carries, scored as errors wherever they occur: 'z' (1 in validation)"
    assert console_of(results).score_lines(results)[-1] == said  # in the summary, not only while the run starts
    # `dwatt evaluate` scores the checkpoint (classes x, y) on the same split the same way, with the same warning.
    from dwatt.cli import main

    caplog.clear()
    with caplog.at_level("WARNING", logger="dwatt.data.classification"):
        assert main(["evaluate", str(tmp_path / "run" / "model"), "--data-dir", str(folder)]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["examples"] == 3 and scored["accuracy"] == pytest.approx(results["best_dev_accuracy"])
    assert scored["z_support"] == 1 and scored["z_f1"] == 0
    assert [r.getMessage().split(": ", 1)[1][:41] for r in caplog.records] == [
        "the label 'z' (1 in validation) is absent"
    ]


def test_a_sampled_n_that_misses_a_class_warns_once_per_label(tiny_backbone, tmp_path, caplog, monkeypatch):
    from dwatt.training import RunConfig
    from dwatt.training.cls import prepare_classification

    folder = unseen_label_folder(tmp_path / "data", ".csv")
    write(
        folder / "train.csv",
        "text,label\npeter call,x\nbrussels lamb,y\npeter to,x\ngerman lamb,y\nto call,w\nlamb,w\n",
    )
    write(folder / "validation.csv", "text,label\npeter boycott,x\nbritish call,y\nlamb to,y\nbrussels,z\n")
    # A sampler that misses class y (and the training file has no z at all); classes: w 0, x 1, y 2, z 3.
    monkeypatch.setattr(
        "dwatt.splits.sample_examples_per_class",
        lambda labels, n, seed, names=None: [i for i, label in enumerate(labels) if label != 2],
    )
    config = RunConfig(
        backbone=str(tiny_backbone),
        task="cls",
        data_dir=str(folder),
        n_shot=2,
        seed=3,
        epochs=1,
        output_dir=str(tmp_path / "run"),
        save_model=False,
        progress=False,
    )
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
    monkeypatch.setattr(
        "dwatt.splits.sample_examples_per_class",
        lambda labels, n, seed, names=None: [i for i, label in enumerate(labels) if label == 1],
    )
    with pytest.raises(ValueError, match=r"the training sample \(2 per class, seed 3\) holds one class \('x'\)"):
        prepare_classification(config)
