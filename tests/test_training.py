"""Training pipeline: freezing, the feature cache, seqeval metrics, and the CLI end to end on a tiny backbone."""

import json
import time

import numpy as np
import pytest
import torch
from seqeval.metrics import f1_score, precision_score, recall_score
from transformers import BertTokenizerFast, DataCollatorForTokenClassification, Trainer, TrainingArguments

from dwatt import RobertaDWAttForTokenClassification
from dwatt.cli import main
from dwatt.data import CONLL_LABELS, load_conll2003, load_tokenizer, tokenize_and_align
from dwatt.features import FeatureCollator, build_feature_cache
from dwatt.metrics import IOBScorer, NERMetrics, entity_scores
from dwatt.training import FreezeBackboneCallback, RunConfig, run, run_ner, trainable_parameter_names

from .conftest import tiny_config

def test_fe_callback_freezes_exactly_the_backbone():
    model = RobertaDWAttForTokenClassification(tiny_config())
    callback = FreezeBackboneCallback("fe")
    callback.apply(model)
    trainable = trainable_parameter_names(model)
    assert trainable and not any(n.startswith("dwatt.backbone.") for n in trainable)
    expected = {n for n, _ in model.named_parameters() if n.startswith(("dwatt.fusion.", "classifier."))}
    assert set(trainable) == expected
    model.train()
    assert model.training and model.dwatt.fusion.training and not model.dwatt.backbone.training
    FreezeBackboneCallback("ft").apply(model)
    assert len(trainable_parameter_names(model)) == len(list(model.parameters()))
    assert model.dwatt.backbone.training
    with pytest.raises(ValueError, match="unknown training mode 'xx'"):
        FreezeBackboneCallback("xx")


def test_trainer_in_fe_mode_leaves_the_backbone_untouched(tiny_backbone, tiny_conll, tmp_path):
    data = load_conll2003(tiny_conll)
    tokenizer = BertTokenizerFast.from_pretrained(tiny_backbone)
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    args = TrainingArguments(output_dir=str(tmp_path), num_train_epochs=2, report_to="none", save_strategy="no",
                             per_device_train_batch_size=4, disable_tqdm=True, learning_rate=1e-2)
    columns = ["input_ids", "attention_mask", "labels"]
    trainer = Trainer(model=model, args=args, train_dataset=tokenize_and_align(data["train"], tokenizer).select_columns(columns),
                      data_collator=DataCollatorForTokenClassification(tokenizer), callbacks=[FreezeBackboneCallback("fe")])
    trainer.train()
    after = model.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed and all(not k.startswith("dwatt.backbone.") for k in changed)
    assert any(k.startswith("dwatt.fusion.") for k in changed) and "classifier.weight" in changed


@pytest.mark.parametrize("fusion", ["dwatt", "base_plus_n", "scalar_mix"])
def test_cached_features_give_exactly_the_uncached_logits_in_fp32(tiny_backbone, tiny_conll, fusion):
    data = load_conll2003(tiny_conll)["validation"]
    tokenizer = BertTokenizerFast.from_pretrained(tiny_backbone)
    tokens = tokenize_and_align(data, tokenizer)
    order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]["input_ids"]))
    tokens = tokens.select(order).select_columns(["input_ids", "token_type_ids", "attention_mask", "labels"])
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion=fusion, num_labels=9).eval()
    cache = build_feature_cache(model, tokens, batch_size=len(tokens), dtype=torch.float32, progress=False)
    cached_batch = FeatureCollator()([cache[i] for i in range(len(cache))])
    direct_batch = DataCollatorForTokenClassification(tokenizer)([tokens[i] for i in range(len(tokens))])
    assert torch.equal(cached_batch["labels"], direct_batch["labels"])
    with torch.no_grad():
        cached = model(backbone_hidden_states=cached_batch["backbone_hidden_states"], attention_mask=cached_batch["attention_mask"]).logits
        direct = model(**{k: v for k, v in direct_batch.items() if k != "labels"}).logits
    real = direct_batch["attention_mask"].bool()  # padded positions hold zeros in the cache, by design
    assert torch.equal(cached[real], direct[real])
    assert cache[0]["backbone_hidden_states"].shape[0] == len(model.dwatt.fused_layer_indices)


def test_memory_mapped_cache_equals_the_in_memory_one(tiny_backbone, tiny_conll, tmp_path):
    tokens = tokenize_and_align(load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone))
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9)
    in_memory = build_feature_cache(model, tokens, progress=False)
    mapped = build_feature_cache(model, tokens, path=tmp_path / "features.bin", progress=False)
    assert (tmp_path / "features.bin").stat().st_size == in_memory.nbytes
    assert torch.equal(in_memory.features, mapped.features) and in_memory.features.dtype == torch.float16


def test_metrics_match_seqeval_on_hand_made_sequences():
    references = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"], ["O", "B-MISC", "I-MISC"]]
    predictions = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"], ["O", "B-MISC", "O"]]
    scores = entity_scores(references, predictions)
    # gold: PER, LOC, ORG, MISC; predicted: PER (right), ORG (wrong span type), ORG (right), MISC (wrong span)
    assert scores["precision"] == pytest.approx(2 / 4) == precision_score(references, predictions)
    assert scores["recall"] == pytest.approx(2 / 4) == recall_score(references, predictions)
    assert scores["f1"] == pytest.approx(0.5) == f1_score(references, predictions)
    assert scores["PER_f1"] == 1.0 and scores["LOC_recall"] == 0.0 and scores["ORG_precision"] == 0.5
    assert scores["MISC_support"] == 1


def test_trainer_metric_ignores_unlabelled_positions():
    names = ["O", "B-PER", "I-PER"]
    logits = np.zeros((1, 4, 3))
    logits[0, [0, 1, 2, 3], [0, 1, 2, 1]] = 1.0  # predicts O B-PER I-PER B-PER
    labels = np.array([[-100, 1, 2, -100]])
    metrics = NERMetrics(names)(type("EvalPrediction", (), {"predictions": logits, "label_ids": labels})())
    assert metrics["f1"] == 1.0


def run_config(tiny_backbone, tiny_conll, tmp_path, **kwargs):
    defaults = dict(backbone=str(tiny_backbone), data_dir=str(tiny_conll), n_shot=2, epochs=3, batch_size=4,
                    learning_rate=5e-3, output_dir=str(tmp_path), progress=False, cache_dtype="float32")
    return RunConfig(**(defaults | kwargs))


def test_cached_and_uncached_runs_reach_the_same_dev_scores(tiny_backbone, tiny_conll, tmp_path):
    cached = run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / "cached", save_model=False))
    uncached = run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / "uncached", use_cache=False, save_model=False))
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


def test_dev_cache_of_scored_positions_gives_the_same_scores(tiny_backbone, tiny_conll):
    tokens = tokenize_and_align(load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone))
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9).eval()
    full = build_feature_cache(model, tokens, dtype=torch.float32, progress=False)
    scored = build_feature_cache(model, tokens, dtype=torch.float32, progress=False, scored_positions_only=True)
    assert scored.features.shape[0] == sum(label != -100 for row in tokens["labels"] for label in row) < full.features.shape[0]
    for index in range(len(tokens)):
        whole, compact = full[index], scored[index]
        keep = whole["labels"] != -100
        assert torch.equal(compact["labels"], whole["labels"][keep])
        with torch.no_grad():
            a = model(backbone_hidden_states=whole["backbone_hidden_states"][None]).logits[0][keep]
            b = model(backbone_hidden_states=compact["backbone_hidden_states"][None]).logits[0]
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    base_plus = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="base_plus_n", num_labels=9)
    with pytest.raises(ValueError, match="needs a per-token fusion; 'base_plus_n' mixes positions"):
        build_feature_cache(base_plus, tokens, scored_positions_only=True)


def test_one_pass_entity_scores_equal_seqeval_classification_report():
    from seqeval.metrics import classification_report

    rng = np.random.default_rng(0)
    tags = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
    for _ in range(50):
        references = [list(rng.choice(tags, size=rng.integers(1, 12))) for _ in range(20)]
        predictions = [list(rng.choice(tags, size=len(r))) for r in references]
        ours = entity_scores(references, predictions)
        report = classification_report(references, predictions, output_dict=True, zero_division=0)
        assert ours["f1"] == pytest.approx(report["micro avg"]["f1-score"], abs=1e-12)
        assert ours["precision"] == pytest.approx(report["micro avg"]["precision"], abs=1e-12)
        assert ours["recall"] == pytest.approx(report["micro avg"]["recall"], abs=1e-12)
        for entity in ("PER", "ORG", "LOC"):
            if entity in report:
                assert ours[f"{entity}_f1"] == pytest.approx(report[entity]["f1-score"], abs=1e-12)
                assert ours[f"{entity}_support"] == report[entity]["support"]


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


def test_layer_weights_per_entity_type_are_distributions_over_the_fused_layers(tiny_backbone, tiny_conll, tmp_path):
    from dwatt.layer_weights import layer_weights_by_type

    results = run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / "run", save_model=False))
    weights = results["dev_layer_weights"]
    assert weights["layers"] == [1, 2, 3] and set(weights["by_type"]) == {"O", "PER", "ORG", "LOC", "MISC"} & set(weights["by_type"])
    for row in weights["by_type"].values():
        assert len(row) == 3 and sum(row) == pytest.approx(1, abs=1e-5)
    data = load_conll2003(tiny_conll)
    tokenizer = load_tokenizer(tiny_backbone)
    dev = tokenize_and_align(data["validation"], tokenizer)
    gold = [CONLL_LABELS[label] for row in dev["labels"] for label in row if label != -100]
    expected = {t: sum(g == t or g[2:] == t for g in gold) for t in weights["positions"]}
    assert weights["positions"] == expected and sum(expected.values()) == len(gold)
    base = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="base", num_labels=9)
    with pytest.raises(ValueError, match="fusion 'base' has no layer weights"):
        layer_weights_by_type(base, dev.select_columns(["input_ids", "attention_mask", "labels"]),
                              DataCollatorForTokenClassification(tokenizer), list(CONLL_LABELS))
    assert "dev_layer_weights" not in run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / "b", fusion="base", save_model=False))


def test_runs_of_one_process_share_backbone_features_and_agree_with_fresh_ones(tiny_backbone, tiny_conll, tmp_path):
    from dwatt.training import FEATURE_MEMO

    FEATURE_MEMO.clear()
    first = run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / "a", save_model=False, fusion="concat"))
    misses = FEATURE_MEMO.misses
    second = run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / "b", save_model=False, fusion="dwatt"))
    assert FEATURE_MEMO.misses == misses and FEATURE_MEMO.hits >= 2  # same layers, sample and dev: no new features
    FEATURE_MEMO.clear()
    fresh = run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / "c", save_model=False, fusion="dwatt"))
    assert fresh["dev_curve"] == second["dev_curve"] and first["dev_curve"] != second["dev_curve"]
    run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / "d", save_model=False, fusion="dwatt", seed=1))
    assert FEATURE_MEMO.misses == 3  # another trial draws another sample: its training features are new


def test_a_run_reading_fewer_layers_takes_them_from_a_remembered_cache_of_more(tiny_backbone, tiny_conll, tmp_path):
    from dwatt.experiment.grid import grid, widest_first
    from dwatt.training import FEATURE_MEMO

    FEATURE_MEMO.clear()
    run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / "all", save_model=False, fusion="dwatt", cache_dtype="float32"))
    misses = FEATURE_MEMO.misses
    derived = run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / "base", save_model=False, fusion="base",
                                 cache_dtype="float32"))
    assert FEATURE_MEMO.misses == misses  # z_L of the sample and of the dev split, out of DWAtt's caches
    FEATURE_MEMO.clear()
    fresh = run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / "fresh", save_model=False, fusion="base",
                               cache_dtype="float32"))
    assert fresh["dev_curve"] == derived["dev_curve"] and fresh["best_dev_scores"] == derived["best_dev_scores"]
    # A sweep runs each sample's all-layer fusions first, so that Base and Base+n find their layer remembered.
    order = [spec.fusion for spec in widest_first(grid(["base", "base_plus_n", "concat", "dwatt"], n_shots=(2, 4), epochs=(1,), trials=1))]
    assert order == ["concat", "dwatt", "base", "base_plus_n"] * 2
    FEATURE_MEMO.clear()


def test_dev_sentences_scores_a_fixed_subset(tiny_backbone, tiny_conll, tmp_path):
    runs = [run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / str(seed), save_model=False, seed=seed,
                               dev_sentences=3)) for seed in (0, 1)]
    assert [r["num_dev_sentences"] for r in runs] == [3, 3]
    supports = [{k: v for k, v in r["best_dev_scores"].items() if k.endswith("_support")} for r in runs]
    assert supports[0] == supports[1]  # every trial is scored on the same sentences
    assert len(load_conll2003(tiny_conll)["validation"]) > 3
    with pytest.raises(ValueError, match="--dev-sentences must be > 0"):
        run_ner(run_config(tiny_backbone, tiny_conll, tmp_path / "x", dev_sentences=0))


@pytest.mark.parametrize("windowed", [False, True])
def test_numpy_scores_of_label_ids_equal_seqeval_s(windowed):
    """`NERMetrics.score_ids` scores IOB ids in numpy (`IOBScorer`): the numbers of seqeval's path, windows joined."""
    rng = np.random.default_rng(1)
    names = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-MISC", "I-MISC"]
    rows = 24
    windows = [(i // 3, 2 - i % 3) for i in range(rows)] if windowed else None  # windows given out of order
    metrics = NERMetrics(names, windows=windows)  # one for all draws: a layout remembered must follow new labels
    for _ in range(40):
        lengths = rng.integers(0, 9, size=rows)
        longest = int(lengths.max()) + 2
        labels = np.full((rows, longest), -100)
        predicted = rng.integers(0, len(names), size=(rows, longest))
        for row, length in enumerate(lengths):
            labels[row, 1:1 + length] = rng.choice(len(names), size=length, p=[0.5] + [1 / 12] * 6)
        batches_predicted = [torch.as_tensor(predicted[i:i + 5]) for i in range(0, rows, 5)]
        batches_labels = [torch.as_tensor(labels[i:i + 5]) for i in range(0, rows, 5)]
        metrics.iob = IOBScorer.for_names(names)
        assert metrics.iob is not None
        fast = metrics.score_ids(batches_predicted, batches_labels)
        # the same labels again (the layout is remembered), with other predictions
        other = [torch.as_tensor(rng.integers(0, len(names), size=tuple(b.shape))) for b in batches_predicted]
        fast_other = metrics.score_ids(other, batches_labels)
        metrics.iob = None  # seqeval's path
        assert fast == pytest.approx(metrics.score_ids(batches_predicted, batches_labels), abs=1e-12)
        assert fast_other == pytest.approx(metrics.score_ids(other, batches_labels), abs=1e-12)
    assert NERMetrics(["O", "S-PER", "B-PER", "I-PER", "E-PER"]).iob is None  # IOBES: seqeval's path
