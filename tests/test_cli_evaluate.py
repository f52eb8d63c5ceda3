"""dwatt evaluate (dwatt.cli.evaluate): the checkpoint's task's scorer on the split asked for, printed as JSON with the
checkpoint named; a batch size below one refused in one line. The scorers: test_evaluation."""

import json

from dwatt import DWAttForTokenClassification
from dwatt.cli import main
from dwatt.data import CONLL_LABELS, load_tokenizer
from dwatt.serving.evaluation import score_tagger


def test_evaluate_prints_the_task_s_scores_of_the_split_asked_for(tiny_backbone, tiny_conll, tmp_path, capsys):
    model = DWAttForTokenClassification.from_backbone(
        str(tiny_backbone), fusion="concat", id2label=dict(enumerate(CONLL_LABELS))
    )
    model.save_pretrained(tmp_path / "tagger")
    tokenizer = load_tokenizer(tiny_backbone)
    tokenizer.save_pretrained(tmp_path / "tagger")
    assert (
        main(
            [
                "evaluate",
                str(tmp_path / "tagger"),
                "--data-dir",
                str(tiny_conll),
                "--split",
                "test",
                "--batch-size",
                "2",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    expected = score_tagger(model.eval(), tokenizer, dataset=None, data_dir=str(tiny_conll), split="test")
    assert printed == {"checkpoint": str(tmp_path / "tagger"), **json.loads(json.dumps(expected))}
    assert main(["evaluate", str(tmp_path / "tagger"), "--data-dir", str(tiny_conll), "--batch-size", "0"]) == 2
    assert capsys.readouterr().err == "dwatt evaluate: error: --batch-size must be >= 1, got 0\n"


def test_evaluate_scores_the_data_the_checkpoint_was_trained_on_where_none_is_given(
    tiny_backbone, tiny_topics, tmp_path, capsys, monkeypatch
):
    """Not "ag_news has no 'test' split" for a head trained on one's own files: the run's results.json beside the
    checkpoint names its data, which evaluate reads (and says so); a data folder this machine lacks is named."""
    monkeypatch.chdir(tiny_topics.parent)  # the run records its data folder relative to where it ran
    run = tmp_path / "run"
    options = ["--backbone", str(tiny_backbone), "--data-dir", tiny_topics.name, "--n-shot", "2", "--epochs", "1"]
    assert main(["train", "--task", "cls", *options, "--label-column", "label", "--output-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run / "model"), "--data-dir", str(tiny_topics)]) == 0
    given = json.loads(capsys.readouterr().out)
    assert main(["evaluate", str(run / "model")]) == 0
    printed = capsys.readouterr()
    assert json.loads(printed.out) == given and given["accuracy"] is not None
    assert f"the data the checkpoint was trained on: {tiny_topics.name} (its results.json)" in printed.err
    monkeypatch.chdir(tmp_path)  # elsewhere, where the recorded folder is not
    assert main(["evaluate", str(run / "model")]) == 2
    assert (
        f"trained on the data folder '{tiny_topics.name}', which is not here: give --data-dir"
        in capsys.readouterr().err
    )
