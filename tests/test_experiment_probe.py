"""The probe (dwatt.experiment.probe, through dwatt probe): a head on every layer at several rates trained together, the
layer chosen on dev named and its head saved (cut where the backbone allows), on NER and on the user's own
classification files, and a stopped probe resumed without training again."""

import json
import re

import pytest
from safetensors import safe_open

from dwatt import RobertaDWAttForSequenceClassification, RobertaDWAttForTokenClassification

from .helpers import stopped_while_scoring_test


def test_dwatt_probe_trains_a_head_per_layer_and_rate_and_names_the_layer_chosen_on_dev(
    tiny_backbone, tiny_conll, tmp_path, capsys
):
    from dwatt.cli import main
    from dwatt.experiment.probe import PROBE_LEARNING_RATES

    results = tmp_path / "probe.jsonl"
    argv = [
        "probe",
        "--backbone",
        str(tiny_backbone),
        "--data-dir",
        str(tiny_conll),
        "--n-shot",
        "2",
        "--epochs",
        "2",
        "--widen",
        "0",
        "--learning-rates",
        "5e-3,5e-2",
        "--cache-dtype",
        "float32",
        "--results",
        str(results),
        "--quiet",
        "--test",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    stored = [json.loads(line) for line in results.read_text().splitlines()]
    rows = [row for row in stored if not row["config"]["shuffle_labels"]]
    # every layer and the embedding output (layer 0), the floor among the layers, each at both rates
    assert len(rows) == 4 * 2 and {r["config"]["layers"] for r in rows} == {"0", "1", "2", "3"}
    assert all(r["trained_together_runs"] == 8 and "f1" in r["test_scores"] for r in rows)
    best = max(rows, key=lambda r: (r["best_dev_f1"], -int(r["config"]["layers"]), -r["config"]["learning_rate"]))
    layer, rate = best["config"]["layers"], best["config"]["learning_rate"]
    assert (
        f"chosen on dev: layer {layer} of 3 at learning rate {rate:g}: dev F1 {100 * best['best_dev_f1']:.2f}, "
        f"test F1 {100 * best['test_scores']['f1']:.2f}"
    ) in printed
    assert printed.splitlines()[1].split() == ["layer", "0.005", "0.05"]
    assert "(layer 0: the embedding output, before the backbone's first layer)" in printed
    embedding = max((r for r in rows if r["config"]["layers"] == "0"), key=lambda r: r["best_dev_f1"])
    if layer != "0":
        assert (
            f"the embedding output (layer 0) at its best rate {embedding['config']['learning_rate']:g}: dev F1 "
            f"{100 * embedding['best_dev_f1']:.2f}, test F1 {100 * embedding['test_scores']['f1']:.2f}; layer {layer} "
            f"scores {100 * (best['best_dev_f1'] - embedding['best_dev_f1']):+.2f} F1 above it on dev"
        ) in printed
    # the floor on the same sample: O everywhere, and a CRF on word features, then the chosen layer's margin over it
    assert "the majority label (O everywhere): dev F1 0.00, test F1 0.00" in printed
    (crf,) = [line for line in printed.splitlines() if line.startswith("no backbone: a CRF on word features (L2")]
    crf_dev = float(crf.split("dev F1 ")[1].split(",")[0])
    (margin,) = [line for line in printed.splitlines() if "the model with no backbone on dev, by" in line]
    said = float(margin.split(", by ")[1].removesuffix(" F1"))
    assert abs(said - (100 * best["best_dev_f1"] - crf_dev)) <= 0.006  # the CRF's dev F1 as printed, to 2 places
    assert margin.startswith("the chosen layer beats" if said > 0 else "the chosen layer does not beat")
    # the selectivity control: the chosen head trained again on the same sample with its tags shuffled, in the store
    (control,) = [row for row in stored if row["config"]["shuffle_labels"]]
    assert control["run_id"] == best["run_id"] + "/shuffled-labels"
    assert (control["config"]["layers"], control["config"]["learning_rate"]) == (layer, rate)
    assert control["sampled_sentence_ids"] == best["sampled_sentence_ids"]
    assert (
        f"control: layer {layer}'s head at {rate:g} trained on shuffled labels: dev F1 "
        f"{100 * control['best_dev_f1']:.2f}, test F1 {100 * control['test_scores']['f1']:.2f}; the chosen head scores "
        f"{100 * (best['best_dev_f1'] - control['best_dev_f1']):+.2f} F1 above it on dev"
    ) in printed
    # its three layers' best heads averaged: the probe's ensemble, beside the choice (no ensemble of 5 of 3 layers)
    (ensemble,) = rows[0]["probe_ensembles"]
    layers = ", ".join(str(member["layer"]) for member in ensemble["members"])
    assert (
        f"the 3 best layers' heads averaged (layers {layers}; --save-ensemble 3 saves it as one model): dev F1 "
        f"{100 * ensemble['best_f1']:.2f}, test F1 {100 * ensemble['test_scores']['f1']:.2f}"
    ) in printed
    # The probe ends in a model: the chosen head, trained again alone, is the probe's own and runs layers 1..k only.
    folder = tmp_path / "chosen" / "model"
    depth = max(int(layer), 1)  # a head on the embedding output keeps the backbone's first layer
    assert f"model: {folder} (runs layers 1-{depth} of 3" in printed and (tmp_path / "probe.png").stat().st_size > 0
    saved = json.loads((tmp_path / "chosen" / "results.json").read_text())
    assert saved["best_dev_f1"] == best["best_dev_f1"] and saved["test_scores"]["f1"] == best["test_scores"]["f1"]
    model = RobertaDWAttForTokenClassification.from_pretrained(folder)
    assert model.config.read_layer == int(layer) and model.dwatt.backbone.config.num_hidden_layers == depth
    card = (folder / "README.md").read_text()
    assert "## How this head was chosen" in card and f"chose layer {layer} at {rate:g}" in card
    assert f"runs layers 1–{depth} of 3" in card or depth == 3
    assert PROBE_LEARNING_RATES == (3e-4, 1e-3, 3e-3, 1e-2)
    model_file = folder / "model.safetensors"
    stamp = model_file.stat().st_mtime_ns
    assert main(argv) == 0  # resumed: nothing left to train, the same rows, the chosen model kept as it is
    assert model_file.stat().st_mtime_ns == stamp
    assert [json.loads(line) for line in results.read_text().splitlines()] == stored
    assert main(["sweep", "--fusions", "dwatt", "--probe-layers", "all", "--results", str(tmp_path / "x.jsonl")]) == 2
    assert "--probe-layers trains a Base head on each layer: add base to --fusions" in capsys.readouterr().err


def test_a_probe_trains_its_heads_in_parts_where_asked(tiny_backbone, tiny_conll, tmp_path, monkeypatch, capsys):
    """`dwatt probe --train-in-parts 4`: 3 layers x 2 rates train as parts of 4 and 2 heads, one probe's rows."""
    from dwatt.cli import main
    from dwatt.stacked_heads import train_heads

    parts = []
    monkeypatch.setattr(
        "dwatt.training.together.train_heads", lambda *a, **k: parts.append(len(a[4])) or train_heads(*a, **k)
    )
    assert (
        main(
            [
                "probe",
                "--backbone",
                str(tiny_backbone),
                "--data-dir",
                str(tiny_conll),
                "--n-shot",
                "1",
                "--epochs",
                "1",
                "--widen",
                "0",
                "--learning-rates",
                "1e-3,1e-2",
                "--results",
                str(tmp_path / "r.jsonl"),
                "--quiet",
                "--no-save",
                "--train-in-parts",
                "4",
                "--no-baselines",
            ]
        )
        == 0
    )
    assert parts == [4, 2] and len((tmp_path / "r.jsonl").read_text().splitlines()) == 6
    capsys.readouterr()


def test_two_probes_of_other_data_into_one_output_each_keep_their_own_store(
    tiny_backbone, tiny_conll, tmp_path, capsys
):
    """The same --output, other data: the second probe runs (no store refuses it), each question's rows in its own
    store; the first asked again resumes from its own rows, training nothing."""
    import shutil

    from dwatt.cli import main

    other = tmp_path / "other"
    shutil.copytree(tiny_conll, other)
    train = other / "train.txt"
    train.write_text(train.read_text().replace("B-PER", "B-ORG", 1))

    def probe(data):
        options = ["--backbone", str(tiny_backbone), "--data-dir", str(data), "--n-shot", "1", "--epochs", "1"]
        flags = ["--widen", "0", "--learning-rates", "1e-2", "--no-save", "--no-baselines", "--quiet"]
        return main(["probe", *options, *flags, "--output", str(tmp_path / "out")])

    assert probe(tiny_conll) == 0
    capsys.readouterr()
    assert probe(other) == 0
    stores = sorted((tmp_path / "out" / "questions").glob("*/results.jsonl"))
    assert len(stores) == 2 and all(len(store.read_text().splitlines()) == 3 for store in stores)  # 3 layers each
    (its_own,) = [store for store in stores if store.parent.name.startswith("ner-other-")]
    assert re.search(rf"rows in {re.escape(str(its_own))}; took \d+ s\n", capsys.readouterr().out)
    before = {store: store.read_text() for store in stores}
    assert probe(tiny_conll) == 0
    assert {store: store.read_text() for store in stores} == before
    capsys.readouterr()


def test_a_probe_stopped_after_its_heads_trained_resumes_without_training_them_again(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch, capsys
):
    """Stopped while the test split is scored (after every copy trained), `dwatt probe` run again trains nothing and
    stores what an uninterrupted probe stores."""
    from dwatt.cli import main
    from dwatt.experiment.store import ResultsStore
    from dwatt.experiment.summaries import comparable

    def probe(results):
        return main(
            [
                "probe",
                "--backbone",
                str(tiny_backbone),
                "--data-dir",
                str(tiny_conll),
                "--n-shot",
                "1",
                "--epochs",
                "2",
                "--widen",
                "0",
                "--learning-rates",
                "1e-3,1e-2",
                "--results",
                str(results),
                "--quiet",
                "--test",
                "--no-save",
                "--no-baselines",
            ]
        )

    stopped_while_scoring_test(monkeypatch, lambda: probe(tmp_path / "stopped" / "r.jsonl"))
    assert not (tmp_path / "stopped" / "r.jsonl").exists()
    assert len(list((tmp_path / "stopped").rglob("dwatt_trained.json"))) == 3 * 2  # 3 layers x 2 rates, all final

    def trains(*args, **kwargs):
        raise AssertionError("trained again")

    with monkeypatch.context() as patched:
        patched.setattr("dwatt.training.together.train_heads", trains)
        assert probe(tmp_path / "stopped" / "r.jsonl") == 0
    assert probe(tmp_path / "straight" / "r.jsonl") == 0
    capsys.readouterr()

    def kept(row):
        row = comparable(row)
        row["config"] = {k: v for k, v in row["config"].items() if k != "output_dir"}
        return {k: v for k, v in row.items() if k not in ("cache_seconds",)}

    resumed, straight = (ResultsStore(tmp_path / name / "r.jsonl").rows() for name in ("stopped", "straight"))
    assert len(resumed) == 6 and [kept(r) for r in resumed] == [kept(r) for r in straight]
    assert not list((tmp_path / "stopped").rglob("dwatt_trained.*"))  # the records go once the results are written


def test_dwatt_probe_on_the_users_own_classification_files_reads_one_cache_and_saves_the_chosen_head(
    tiny_backbone, tiny_topics, tmp_path, capsys
):
    """A probe for text classification on TSV files with columns of the user's naming: each head on one layer, read
    out of one cache of every layer, scores what that head trained alone scores; the chosen head is saved cut at its
    layer and `dwatt predict` runs it."""
    from dwatt.cli import main

    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.csv", "dev.csv"):
        lines = (tiny_topics / name).read_text().splitlines()
        (data / name.replace(".csv", ".tsv")).write_text(
            "sentence\ttopic\n" + "".join(line.replace(",", "\t") + "\n" for line in lines[1:])
        )
    options = [
        "--task",
        "cls",
        "--backbone",
        str(tiny_backbone),
        "--data-dir",
        str(data),
        "--text-column",
        "sentence",
        "--label-column",
        "topic",
        "--n-shot",
        "3",
        "--epochs",
        "3",
        "--cache-dtype",
        "float32",
        "--pooling",
        "mean",  # one pooling: the probe given none compares two (tests/test_probe_poolings.py)
    ]
    results = tmp_path / "probe" / "results.jsonl"
    assert (
        main(
            ["probe", *options, "--widen", "0", "--learning-rates", "5e-3,5e-2", "--results", str(results), "--quiet"]
        )
        == 0
    )
    printed = capsys.readouterr().out
    stored = [json.loads(line) for line in results.read_text().splitlines()]
    rows = [row for row in stored if not row["config"]["shuffle_labels"]]
    assert len(rows) == 4 * 2 and {row["config"]["layers"] for row in rows} == {"0", "1", "2", "3"}
    (control,) = [row for row in stored if row["config"]["shuffle_labels"]]  # the selectivity control, on the cache
    assert control["sampled_example_ids"] == rows[0]["sampled_example_ids"] and "trained on shuffled labels" in printed
    assert printed.splitlines()[0].startswith("dev accuracy by layer and learning rate")
    best = max(
        rows, key=lambda r: (r["best_dev_accuracy"], -int(r["config"]["layers"]), -r["config"]["learning_rate"])
    )
    layer, rate = best["config"]["layers"], best["config"]["learning_rate"]
    assert (
        f"chosen on dev: layer {layer} of 3 at learning rate {rate:g}: dev accuracy {100 * best['best_dev_accuracy']:.2f}"
        in printed
    )
    from dwatt.training import RunConfig, run_together

    for layer in ("0", "1"):  # the embedding output's head too, whose model runs the backbone's first layer only
        probed = next(r for r in rows if r["config"]["layers"] == layer and r["config"]["learning_rate"] == 5e-2)
        alone = RunConfig(
            **(
                probed["config"]
                | {
                    "output_dir": str(tmp_path / f"alone-{layer}"),
                    "save_model": False,
                    "backbone": str(tiny_backbone),
                    "data_dir": str(data),
                }
            )
        )
        (trained,) = run_together([alone])
        assert probed["engine"] == "stacked" and trained["dev_curve"] == probed["dev_curve"]
    model = tmp_path / "probe" / "chosen" / "model"
    assert (tmp_path / "probe" / "probe.png").is_file() and f"model: {model}" in printed
    # the encoder's default mean pooling: the closing lines say why no stock class computes it, and what would
    assert "no stock export: a cls head has no stock transformers class" in printed and "--pooling first" in printed
    capsys.readouterr()
    assert main(["predict", str(model), "lamb to boycott"]) == 0
    assert capsys.readouterr().out.strip()


def test_dwatt_probe_for_classification_on_a_decoder_pools_the_last_token_and_saves_a_cut_head(
    tiny_decoder, tiny_topics, tmp_path, capsys
):
    from dwatt.cli import main

    results = tmp_path / "probe" / "results.jsonl"
    assert (
        main(
            [
                "probe",
                "--task",
                "cls",
                "--backbone",
                str(tiny_decoder),
                "--data-dir",
                str(tiny_topics),
                "--n-shot",
                "3",
                "--epochs",
                "2",
                "--learning-rates",
                "5e-2",
                "--layers",
                "1,2",
                "--trials",
                "2",
                "--results",
                str(results),
                "--quiet",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    stored = [json.loads(line) for line in results.read_text().splitlines()]
    rows = [row for row in stored if not row["config"]["shuffle_labels"]]
    assert len(rows) == 3 * 2 and {row["pooling"] for row in stored} == {"last"}  # layers 1, 2 and 0
    assert {row["config"]["layers"] for row in rows} == {"0", "1", "2"}
    assert len(stored) - len(rows) == 2  # a shuffled-label control per trial
    assert "each trial's own choice: layer" in printed
    model = RobertaDWAttForSequenceClassification.from_pretrained(tmp_path / "probe" / "chosen" / "model")
    assert model.dwatt.is_cut and model.dwatt.backbone.config.num_hidden_layers == max(model.config.read_layer, 1)


def test_a_probe_saves_its_best_layers_heads_as_one_model_that_scores_as_its_ensemble_did(
    tiny_backbone, tiny_conll, tmp_path, capsys
):
    """`--save-ensemble 3`: the heads of trial 0's three best layers, trained again and saved as one model, are the
    probe's ensemble of 3: the same members, and `dwatt evaluate` scores it on test as the probe did."""
    from dwatt.cli import main

    argv = [
        "probe",
        "--backbone",
        str(tiny_backbone),
        "--data-dir",
        str(tiny_conll),
        "--n-shot",
        "2",
        "--epochs",
        "3",
        "--widen",
        "0",
        "--learning-rates",
        "5e-3,5e-2",
        "--cache-dtype",
        "float32",
        "--results",
        str(tmp_path / "probe.jsonl"),
        "--quiet",
        "--test",
    ]
    assert main([*argv, "--save-ensemble", "3"]) == 0
    printed = capsys.readouterr().out
    (probed,) = [
        entry
        for row in map(json.loads, (tmp_path / "probe.jsonl").read_text().splitlines())
        for entry in row.get("probe_ensembles") or []
        if entry["size"] == 3
    ]
    folder = tmp_path / "ensemble-3"
    manifest = json.loads((folder / "ensemble.json").read_text())
    members = [(member["layer"], member["learning_rate"]) for member in probed["members"]]
    assert list(zip(manifest["layers"], manifest["learning_rates"])) == members
    assert manifest["members"] == [f"layer-{layer}/model" for layer, _ in members]
    deepest = max(layer for layer, _ in members)
    for layer, _ in members:  # the backbone stored once: by the deepest member, cut at its layer; the others head-only
        member = folder / f"layer-{layer}" / "model"
        config = json.loads((member / "config.json").read_text())
        assert config.get("backbone_depth") is None and bool(config.get("heads_only")) == (layer != deepest)
        with safe_open(str(member / "model.safetensors"), "pt") as stored:
            kept = {int(key.split(".layer.")[1].split(".")[0]) for key in stored.keys() if ".encoder.layer." in key}
            embeddings = any(".embeddings." in key for key in stored.keys())
        assert kept == (set(range(layer)) if layer == deepest else set()) and embeddings == (layer == deepest)
    assert f"ensemble: {folder} (the 3 best layers' heads of trial 0 averaged: layers " in printed
    assert main(["evaluate", str(folder), "--data-dir", str(tiny_conll), "--split", "test"]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(probed["test_scores"]["f1"], abs=1e-9)
    assert main(["predict", str(folder), "peter blackburn rejects"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.split("\n")[:3]] == ["peter", "blackburn", "rejects"]
    assert main(["predict", str(folder), "--quantize", "int8", "eu"]) == 0  # int8 and export: test_ensemble
    assert capsys.readouterr().out.split()[0] == "eu"
    assert main([*argv, "--save-ensemble", "5"]) == 2  # three layers probed, and the embedding output
    assert "--save-ensemble 5: the probe has 4 layers to average" in capsys.readouterr().err


def test_what_the_probe_says_of_the_top_3_ensemble_is_what_the_committed_fair_comparison_found():
    """The probe's words on the top-3 average follow the pooled, Holm-corrected verdict of the fair comparison's
    tables for each dataset (regenerated from the stores by `dwatt report`)."""
    import csv
    from pathlib import Path

    from dwatt.experiment.probe import ENSEMBLE_EVIDENCE, ensemble_evidence

    root = Path(__file__).resolve().parents[1] / "docs" / "results"
    found = {}
    for grid in ("fair-cpu", "fair-agnews"):
        with open(root / grid / "report" / "tables" / "across_settings.csv", newline="") as table:
            for row in csv.DictReader(table):
                if row["method"] == "top-3 layers averaged":
                    found[row["dataset"]] = row["verdict"]
    assert {dataset: verdict for dataset, (_, verdict) in ENSEMBLE_EVIDENCE.items()} == found
    assert ensemble_evidence("ner", 5) == ""
    assert "--save-ensemble" not in ensemble_evidence("ner", 3, saved=True)
    for task, dataset in (("ner", "conll2003"), ("cls", "ag_news")):
        expected = "keep it with --save-ensemble 3" if found[dataset] == "beats" else "simpler model to serve"
        assert expected in ensemble_evidence(task, 3), (task, found[dataset])


def test_a_tie_on_dev_is_said_with_the_rule_that_broke_it():
    """Layers 1 and 5 both at 100.00 on dev: the probe names the tie and the rule (the shallower layer, then the
    smaller rate), where it chose without a word."""
    from dwatt.experiment.probe import summary_lines
    from dwatt.experiment.probe_types import ProbeOutcome

    scores = {(0, 1, 1e-3): {"dev": 100.0, "test": 90.0}, (0, 5, 1e-3): {"dev": 100.0, "test": 95.0}}
    scores |= {(0, 3, 1e-3): {"dev": 80.0, "test": 80.0}, (0, 5, 1e-2): {"dev": 100.0, "test": 96.0}}
    outcome = ProbeOutcome("ner", scores, (1, 1e-3), {0: (1, 1e-3)}, 100, depth=5)
    lines = summary_lines(outcome)
    assert (
        lines[1]
        == "tied on dev with layer 5 at 0.001, layer 5 at 0.01: the shallower layer is chosen, then the smaller rate"
    )
    alone = ProbeOutcome("ner", {(0, 1, 1e-3): {"dev": 90.0, "test": 90.0}}, (1, 1e-3), {0: (1, 1e-3)}, 100, depth=5)
    assert not any(line.startswith("tied on dev") for line in summary_lines(alone))


def test_labels_a_trial_s_training_sample_lacks_are_said_in_the_probe_s_summary():
    from dwatt.experiment.probe import summary_lines
    from dwatt.experiment.probe_types import ProbeOutcome

    scores = {(trial, 1, 1e-3): {"dev": 50.0, "test": 40.0} for trial in (0, 1)}
    outcome = ProbeOutcome("cls", scores, (1, 1e-3), {0: (1, 1e-3), 1: (1, 1e-3)}, 100, depth=1)
    outcome.unseen_labels = {"drugs": {0: {"test": 1}, 1: {"test": 1}}, "food": {1: {"validation": 2, "test": 3}}}
    assert summary_lines(outcome)[1] == (
        "labels no training example carries, scored as errors wherever they occur: 'drugs' (1 in test; every trial), "
        "'food' (2 in validation, 3 in test; trial 1)"
    )
