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
