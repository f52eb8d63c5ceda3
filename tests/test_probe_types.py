"""What a probe is asked and what it found (dwatt.experiment.probe_types): the settings refuse what no probe can do,
say what every run shares, and the outcome reads its scores by layer and rate."""

import math

import pytest

from dwatt.experiment.probe_types import ProbeOutcome, ProbeSettings, layer_span, spec_at


@pytest.mark.parametrize(
    "kwargs, refused",
    [
        ({"task": "mlm"}, r"--task: a probe trains heads for ner, cls, multilabel or regression, not 'mlm'"),
        ({"save_ensemble": 1}, r"--save-ensemble: an ensemble averages at least 2"),
        ({"widen": -1}, r"--widen: a count of rates"),
        ({"save_ensemble": 3, "save_model": False}, r"--save-ensemble saves a model"),
        ({"pooling": "mean"}, r"--pooling and the --\*-column options are for text classification"),
    ],
)
def test_settings_refuse_what_no_probe_can_do(kwargs, refused):
    with pytest.raises(ValueError, match=refused):
        ProbeSettings(**kwargs)


def test_settings_say_where_files_go_and_what_every_run_shares(tmp_path):
    settings = ProbeSettings(task="cls", results=str(tmp_path / "r.jsonl"), test=True, text_column="body")
    assert settings.folder == tmp_path
    assert ProbeSettings(output=str(tmp_path / "out")).folder == tmp_path / "out"
    overrides = settings.overrides()
    assert overrides["evaluate_test"] is True and overrides["text_column"] == "body"
    assert "label_column" not in overrides and "evaluate_test" not in ProbeSettings().overrides()


def test_each_question_has_its_own_store_known_by_what_it_asks(tmp_path):
    """Without --results, the store is the question's own under the output folder: other data (by content, in a
    folder of the same name too), another backbone or a setting that changes the numbers gets another store; more
    trials, samples or rates of the same question keep the same one; --results is a store shared on purpose."""
    data = tmp_path / "a" / "mydata"
    data.mkdir(parents=True)
    (data / "train.txt").write_text("peter B-PER\n")
    out = tmp_path / "out"

    def store(**kwargs):
        return ProbeSettings(data_dir=str(data), output=str(out), **kwargs).store

    first = store()
    assert first.parent.parent == out / "questions" and first.name == "results.jsonl"
    assert first.parent.name.startswith("ner-mydata-")
    assert store(trials=5, n_shot=8, learning_rates=(1e-3,), layers="2-3") == first
    assert len({first, store(test=True), store(dev_sentences=100), store(through_final_norm=True)}) == 4
    (data / "train.txt").write_text("paris B-LOC\n")  # the same folder, other data
    assert store() != first
    assert ProbeSettings(output=str(out)).store.parent.name.startswith("ner-conll2003-")
    assert ProbeSettings(task="cls").store.parts[:3] == ("runs", "probe", "questions")
    assert ProbeSettings(results=str(tmp_path / "shared.jsonl"), output=str(out)).store == tmp_path / "shared.jsonl"


def test_the_outcome_reads_its_scores_by_layer_and_rate():
    """Layer 2's best rate is the larger (an edge); layer 1 was never scored at 1e-2, which ranks last there."""
    scores = {
        (0, 1, 1e-3): {"dev": 50.0, "test": 40.0},
        (1, 1, 1e-3): {"dev": 60.0, "test": None},
        (0, 2, 1e-3): {"dev": 55.0, "test": 45.0},
        (0, 2, 1e-2): {"dev": 70.0, "test": 65.0},
    }
    outcome = ProbeOutcome("ner", scores, (2, 1e-2), {}, 100, depth=2)
    assert outcome.layers == [1, 2] and outcome.rates == [1e-3, 1e-2] and outcome.trials == [0, 1]
    assert outcome.mean(1, 1e-3) == pytest.approx(55.0) and outcome.mean(1, 1e-3, "test") == pytest.approx(40.0)
    assert math.isnan(outcome.mean(1, 1e-2))
    assert outcome.best_rate(1) == 1e-3 and outcome.best_rate(2) == 1e-2
    assert outcome.edges() == {"smallest": [1], "largest": [2]}
    assert outcome.metrics == ("best_dev_f1", "f1", "F1") and outcome.depth_text() == "2"


def test_a_layer_that_scores_alike_at_every_rate_is_at_no_edge():
    """Layer 0 at chance (25.00) at every rate: its "best" rate, the smallest by the tie rule, is no reason to widen."""
    scores = {(0, 0, rate): {"dev": 25.0, "test": None} for rate in (1e-3, 1e-2)}
    scores |= {(0, 1, 1e-3): {"dev": 60.0, "test": None}, (0, 1, 1e-2): {"dev": 50.0, "test": None}}
    outcome = ProbeOutcome("cls", scores, (1, 1e-3), {}, 100, depth=1)
    assert outcome.edges() == {"smallest": [1]}


def test_spans_and_runs_are_found_as_asked():
    from types import SimpleNamespace

    assert layer_span([1, 2, 3, 4]) == "1-4" and layer_span([1, 3]) == "1, 3" and layer_span([2, 3]) == "2, 3"
    specs = [SimpleNamespace(trial=t, layers=str(k), learning_rate=r) for t in (0, 1) for k in (1, 2) for r in (1e-3,)]
    assert spec_at(specs, 1, 2, 1e-3) is specs[3]
