"""The floor under every head (dwatt.experiment.baselines): the majority label and a model with no backbone, on the
run's own sample and splits, their one hyperparameter chosen on dev with the grid widened at an edge; and what the
probe says of them."""

import pytest

from dwatt.experiment.baselines import BaselineScores, floor_lines, mean_scores, word_features
from dwatt.experiment.widening import Widening, widened_choice
from dwatt.run_config import RunConfig


def test_a_word_is_read_by_its_form_its_affixes_and_its_neighbours():
    features = word_features(["EU", "rejects", "German-made", "lamb"], 2)
    assert features["word"] == "German-made" and features["lower"] == "german-made"
    assert features["shape"] == "Xxxxxx-xxxx" and features["short_shape"] == "Xx-x"
    assert (features["prefix3"], features["suffix3"]) == ("Ger", "ade") and features["title"] is False
    assert (features["-1:lower"], features["1:lower"], features["-2:lower"]) == ("rejects", "lamb", "eu")
    assert features["2:edge"] is True and "2:lower" not in features


def test_a_choice_on_dev_widens_past_the_edge_it_sits_at():
    fitted = []

    def fit(value):  # dev score peaks at 1e-4, below the grid asked for
        fitted.append(value)
        return (-abs(value - 1e-4), f"model at {value:g}")

    value, (_, model), widening = widened_choice((1e-2, 1e-1, 1.0), fit, Widening(floor=1e-6, ceiling=1e3))
    assert value == 1e-4 and model == "model at 0.0001" and fitted == [1e-2, 1e-1, 1.0, 1e-3, 1e-4, 1e-5]
    assert widening.note() == " (0.001, 0.0001, 1e-05 added below)"
    capped = widened_choice((1e-2, 1e-1), fit, Widening(steps=1, floor=1e-6, ceiling=1e3, unit="value", option=""))
    assert capped[0] == 1e-3 and capped[2].note() == (
        " (0.001 added below; at the smallest value tried: 1 value added past the grid asked for)"
    )


def test_the_ner_floor_on_a_toy_set_the_crf_learns_whole(tiny_conll, tmp_path):
    """Dev and test hold the training sentences: the CRF on the whole split tags them all; O everywhere finds no
    entity (F1 0)."""
    from dwatt.experiment.baselines import baselines

    config = RunConfig(data_dir=str(tiny_conll), n_shot=None, evaluate_test=True, output_dir=str(tmp_path))
    majority, crf = baselines(config)
    assert (majority.dev, majority.test) == (0.0, 0.0) and majority.name == "the majority label (O everywhere)"
    assert (crf.dev, crf.test) == (100.0, 100.0) and crf.chosen.startswith("L2 weight ")
    quiet = baselines(RunConfig(data_dir=str(tiny_conll), n_shot=None, output_dir=str(tmp_path)))
    assert quiet[1].test is None and quiet[1].dev == 100.0


def test_sentences_of_one_length_are_tagged_as_lists_of_strings(tmp_path):
    """sklearn-crfsuite returns one 2-D array where every sentence has the same length; seqeval reads lists."""
    from dwatt.experiment.baselines import baselines

    line = "\n".join(f"{word} {tag}" for word, tag in [("Peter", "B-PER"), ("visited", "O"), ("Paris", "B-LOC")])
    for name in ("train.txt", "valid.txt", "test.txt"):
        (tmp_path / name).write_text("-DOCSTART- O\n\n" + "\n".join([line + "\n"] * 6))
    _, crf = baselines(RunConfig(data_dir=str(tmp_path), n_shot=None, evaluate_test=True, output_dir=str(tmp_path)))
    assert (crf.dev, crf.test) == (100.0, 100.0)


def test_the_classification_floor_on_a_toy_set(tmp_path):
    from dwatt.experiment.baselines import baselines

    rows = [(f"goal match {i} team", "sports") for i in range(6)] + [
        (f"shares market {i} bank", "business") for i in range(6)
    ]
    dev = rows[:2] + rows[6:9]  # 2 sports, 3 business
    for name, chosen in (("train.csv", rows), ("dev.csv", dev), ("test.csv", rows[2:4])):
        (tmp_path / name).write_text("text,label\n" + "".join(f"{t},{label}\n" for t, label in chosen))
    config = RunConfig(
        task="cls", data_dir=str(tmp_path), n_shot=3, evaluate_test=True, output_dir=str(tmp_path / "o")
    )
    majority, tfidf = baselines(config)
    assert (tfidf.dev, tfidf.test) == (100.0, 100.0) and tfidf.chosen.startswith("C ")
    # 3 of each class in the sample: the tie goes to the first label (sorted: business), 3 of dev's 5, none of test's
    assert (majority.dev, majority.test) == (60.0, 0.0)


def test_the_multi_label_and_regression_floors_on_toy_sets(tmp_path):
    """One logistic regression per label, scored by micro-F1, and ridge regression, scored by Spearman: each learns
    the toy rule; the majority predicts the labels most sampled texts carry, the mean a constant (no
    correlation)."""
    from dwatt.experiment.baselines import baselines

    words = {"sports": "goal match team", "business": "shares market bank"}
    rows = [(f"{words['sports']} {i}", "sports") for i in range(4)] + [
        (f"{words['business']} {i}", "business") for i in range(4)
    ]
    rows += [(f"{words['sports']} {words['business']} {i}", "sports|business") for i in range(4)]
    for kind in ("multilabel", "regression"):
        folder = tmp_path / kind
        folder.mkdir()
        for name in ("train.csv", "dev.csv", "test.csv"):
            lines = "".join(f"{t},{labels if kind == 'multilabel' else len(t.split())}\n" for t, labels in rows)
            (folder / name).write_text(("text,labels\n" if kind == "multilabel" else "text,score\n") + lines)
    config = RunConfig(task="multilabel", data_dir=str(tmp_path / "multilabel"), n_shot=2, evaluate_test=True)
    majority, linear = baselines(config)
    assert linear.name.endswith("one logistic regression per label") and linear.chosen.startswith("C ")
    assert (linear.dev, linear.test) == (100.0, 100.0) and majority.dev < linear.dev
    config = RunConfig(task="regression", data_dir=str(tmp_path / "regression"), n_shot=8, evaluate_test=True)
    mean, ridge = baselines(config)
    assert ridge.name.endswith("ridge regression") and ridge.chosen.startswith("alpha ")
    assert ridge.dev > 50 and (mean.dev, mean.test) == (0.0, 0.0)


def test_a_missing_package_is_named_with_the_extra_that_brings_it(monkeypatch, tmp_path):
    from dwatt.experiment import baselines

    def missing(config):
        raise ModuleNotFoundError("No module named 'sklearn_crfsuite'", name="sklearn_crfsuite")

    with pytest.raises(ValueError, match="the baselines score labels: 'mlm' has none"):
        baselines.baselines(RunConfig(task="mlm", output_dir=str(tmp_path)))
    monkeypatch.setitem(baselines.BASELINES_OF_KIND, "tagging", missing)
    with pytest.raises(ModuleNotFoundError, match=r'need sklearn_crfsuite: pip install "dwatt\[probe\]"'):
        baselines.baselines(RunConfig(output_dir=str(tmp_path)))
    assert floor_lines([], 50.0, "F1", "the no-backbone baselines need x") == [
        "no baseline scored: the no-backbone baselines need x"
    ]


def test_the_floor_is_averaged_over_trials_and_the_margin_said():
    trials = [
        [BaselineScores("majority", 0.0, 0.0), BaselineScores("crf", 40.0, 30.0, "L2 weight 0.1")],
        [BaselineScores("majority", 0.0, 0.0), BaselineScores("crf", 50.0, None, "L2 weight 1 (0.1 added below)")],
    ]
    majority, crf = mean_scores(trials)
    assert (crf.dev, crf.test, majority.test) == (45.0, None, 0.0)
    assert crf.chosen == "trial 0: L2 weight 0.1; trial 1: L2 weight 1 (0.1 added below)"
    assert floor_lines([majority, crf], 47.5, "F1")[1] == (
        "crf (trial 0: L2 weight 0.1; trial 1: L2 weight 1 (0.1 added below); chosen on dev): dev F1 45.00"
    )
    (alike,) = mean_scores([[BaselineScores("crf", 40.0, None, "C 1")]] * 3)
    assert alike.chosen == "C 1 in each of 3 trials"  # said once, not once a trial
    assert (
        floor_lines([majority, crf], 47.5, "F1")[-1]
        == "the chosen layer beats the model with no backbone on dev, by +2.50 F1"
    )
    assert floor_lines([majority, crf], 40.0, "F1")[-1] == (
        "the chosen layer does not beat the model with no backbone on dev, by -5.00 F1"
    )


def test_the_install_the_which_layer_guide_gives_brings_the_figure_and_the_floor():
    """`pip install "dwatt[probe]"`: matplotlib for probe.png, scikit-learn and sklearn-crfsuite for the floor."""
    import configparser
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    setup = configparser.ConfigParser()
    setup.read(root / "setup.cfg")
    extras = setup["options.extras_require"]
    probe = extras.get("probe", raw=False).split()
    assert {"matplotlib>=3.7", "scikit-learn>=1.3", "sklearn-crfsuite>=0.5"} <= set(probe)
    assert 'pip install "dwatt[probe]"' in (root / "docs" / "guides" / "which-layer.md").read_text()
