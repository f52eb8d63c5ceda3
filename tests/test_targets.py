"""Text tasks beyond one class per text (dwatt.data.targets): multi-label rows (lists, or names joined by a
separator) and numeric targets, read per task, refused where the task reads them otherwise, sampled, scored, probed,
served by `dwatt predict` and exported to the stock sequence classifier that transformers' pipeline runs alike."""

import json

import numpy as np
import pytest

from dwatt.cli import main
from dwatt.data.classification import load_classification_folder, read_classification_file
from dwatt.data.files import DataFormatError
from dwatt.data.targets import MULTI_LABEL, REGRESSION, decided, multi_label_names, separator_of
from dwatt.metrics import multi_label_scores, regression_scores
from dwatt.sampling import sample_examples_per_label

from .conftest import WORDS, run_without_dwatt
from .helpers import write


def test_a_multi_label_cell_is_a_list_or_names_joined_by_the_file_s_separator():
    assert multi_label_names(["a", "b", "a"], None) == ["a", "b"]
    assert multi_label_names('["x", "y"]', None) == ["x", "y"]
    assert multi_label_names("['x', 'y']", None) == ["x", "y"]  # a list column as pandas writes it
    assert multi_label_names("x | y", "|") == ["x", "y"]
    assert multi_label_names("", ",") == []  # a text with no label
    assert separator_of(["a;b", "c", "[1]"]) == ";" and separator_of(["a", "b"]) is None


def test_each_task_reads_its_own_label_column_and_refuses_the_others(tmp_path):
    lists = write(tmp_path / "lists.jsonl", '{"text": "a", "labels": ["x", "y"]}\n{"text": "b", "labels": []}\n')
    scores = write(tmp_path / "scores.csv", "text,score\na,1.0\nb,2.4\nc,1.1\n")
    with pytest.raises(DataFormatError, match=r"lists.jsonl:1: .* is a list: .* --task multilabel"):
        read_classification_file(lists)
    with pytest.raises(DataFormatError, match=r"scores.csv:3: .*fractional.*--task regression"):
        read_classification_file(scores)
    multi = read_classification_file(lists, problem_type=MULTI_LABEL)
    assert multi["label"] == [[0, 1], []] and multi.features["label"].feature.names == ["x", "y"]
    numbers = read_classification_file(scores, problem_type=REGRESSION)
    assert numbers["label"] == pytest.approx([1.0, 2.4, 1.1])
    write(tmp_path / "absent.jsonl", '{"text": "a", "labels": ["x"]}\n{"text": "b"}\n')
    with pytest.raises(DataFormatError, match=r"absent.jsonl:2: missing 'labels'"):
        read_classification_file(tmp_path / "absent.jsonl", problem_type=MULTI_LABEL)
    write(tmp_path / "bad.csv", "text,score\na,1.0\nb,high\n")
    with pytest.raises(DataFormatError, match=r"bad.csv:3: the target 'high' is not a number"):
        read_classification_file(tmp_path / "bad.csv", problem_type=REGRESSION)
    whole_numbers = write(tmp_path / "classes.csv", "text,label\na,1\nb,2\n")  # class ids written as numbers
    assert read_classification_file(whole_numbers).features["label"].names == ["1", "2"]


def test_a_label_only_dev_holds_joins_the_names_after_train_s(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write(folder / "train.csv", "text,labels\na,x|y\nb,y\n")
    write(folder / "dev.csv", "text,labels\nc,z|x\n")
    data = load_classification_folder(folder, problem_type=MULTI_LABEL)
    assert data["validation"].features["label"].feature.names == ["x", "y", "z"]
    assert data["validation"]["label"] == [[2, 0]]


def test_multi_label_sampling_gives_each_label_n_examples():
    rows = [[0], [1], [0, 1], [2], [2, 0], [1], [2], [0]]
    chosen = sample_examples_per_label(rows, 2, seed=0)
    for label in (0, 1, 2):
        assert sum(label in rows[i] for i in chosen) >= 2
    assert chosen == sample_examples_per_label(rows, 2, seed=0)
    with pytest.raises(ValueError, match="only 3 examples carry the label 'b'"):
        sample_examples_per_label(rows, 4, seed=0, label_names=["a", "b", "c"])


def test_the_scores_count_what_the_model_cannot_say_as_errors():
    logits = np.array([[1.0, -1.0], [2.0, 3.0], [-1.0, -2.0]])
    assert decided(logits, MULTI_LABEL).tolist() == [[1, 0], [1, 1], [0, 0]]
    assert decided(logits, REGRESSION).tolist() == [1.0, 2.0, -1.0]
    labels = np.array([[1, 0], [1, 0], [0, 1]])
    scores = multi_label_scores(decided(logits, MULTI_LABEL), labels, ["a", "b"])
    assert scores["micro_precision"] == pytest.approx(2 / 3) and scores["micro_recall"] == pytest.approx(2 / 3)
    assert scores["subset_accuracy"] == pytest.approx(1 / 3)
    missed = multi_label_scores(decided(logits, MULTI_LABEL), labels, ["a", "b"], {"c": 2})
    assert missed["micro_recall"] == pytest.approx(2 / 5) and missed["c_f1"] == 0.0
    assert regression_scores([1, 2, 3], [10, 20, 40])["spearman"] == pytest.approx(1.0)
    assert regression_scores([1, 1, 1], [1, 2, 3])["spearman"] == 0.0  # constant predictions: no correlation


def text_folder(folder, task: str):
    """Train, dev and test CSV files in the tiny backbone's vocabulary: topics joined by "|" (multi-label) or a number
    that grows with the text's topics (regression)."""
    topics = {"people": WORDS[8:10], "places": ["brussels", "british"], "food": ["lamb", "boycott"]}
    names = list(topics)
    folder.mkdir()
    rows = []
    for i in range(24):
        carried = [names[i % 3]] + ([names[(i + 1) % 3]] if i % 4 == 0 else [])
        rows.append((" ".join(topics[t][(i + j) % 2] for t in carried for j in range(2)), carried))
    for split, part in (("train", rows[:12]), ("dev", rows[12:18]), ("test", rows[18:])):
        if task == "multilabel":  # names joined by "|" in a CSV cell
            write(folder / f"{split}.csv", "text,labels\n" + "".join(f"{t},{'|'.join(c)}\n" for t, c in part))
        else:
            lines = "".join(f"{t},{len(c) + 0.5 * names.index(c[0])}\n" for t, c in part)
            write(folder / f"{split}.csv", "text,score\n" + lines)
    return [text for text, _ in rows[18:]]


@pytest.mark.parametrize("task", ["multilabel", "regression"])
def test_a_probe_on_multi_label_or_numeric_data_chooses_a_head_that_serves_stock_as_dwatt_predicts(
    tiny_backbone, tmp_path, capsys, task
):
    """The probe reads the folder as the task says, chooses a layer by micro-F1 or Spearman, exports its head as the
    stock sequence classifier (its problem type kept), and transformers' pipeline, in a process without dwatt, gives
    every test text what `dwatt predict` gives: the labels above 0.5, or the score."""
    texts = text_folder(tmp_path / "mine", task)
    argv = ["probe", "--task", task, "--backbone", str(tiny_backbone), "--data-dir", str(tmp_path / "mine")]
    argv += ["--n-shot", "2", "--epochs", "2", "--learning-rates", "1e-2", "--widen", "0", "--no-baselines"]
    argv += ["--test", "--pooling", "first", "--output", str(tmp_path / "p"), "--quiet"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert ("dev micro-F1" if task == "multilabel" else "dev Spearman") in printed
    assert "--format transformers (a stock model" in printed
    chosen = tmp_path / "p" / "chosen" / "model"
    assert main(["export", str(chosen), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    config = json.loads((tmp_path / "stock" / "config.json").read_text())
    assert config["problem_type"] == {"multilabel": MULTI_LABEL, "regression": REGRESSION}[task]
    write(tmp_path / "in.txt", "\n".join(texts) + "\n")
    capsys.readouterr()
    assert main(["predict", str(chosen), "--jsonl", str(tmp_path / "in.txt"), "--quiet"]) == 0
    predicted = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = [p["labels"] if task == "multilabel" else p["score"] for p in predicted]
    run_without_dwatt(
        f"""
        from transformers import pipeline
        classify = pipeline("text-classification", model={str(tmp_path / "stock")!r}, trust_remote_code=False)
        for text, wanted in zip({texts!r}, {expected!r}):
            if {task!r} == "multilabel":  # a sigmoid per label, as the config's problem type asks
                found = sorted(s["label"] for s in classify(text, top_k=None) if s["score"] > 0.5)
                assert found == sorted(wanted), (text, found, wanted)
            else:  # the output itself
                found = classify(text, function_to_apply="none")[0]["score"]
                assert abs(found - wanted) < 1e-4, (text, found, wanted)
        """,
        tmp_path,
    )
    assert main(["export", str(chosen), str(tmp_path / "onnx")]) == 0  # its ONNX export reads its task's outputs
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "onnx"), "--jsonl", str(tmp_path / "in.txt"), "--quiet"]) == 0
    exported = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    if task == "multilabel":
        assert [e["labels"] for e in exported] == expected
    else:
        assert [e["score"] for e in exported] == pytest.approx(expected, abs=1e-4)
    capsys.readouterr()
    assert main(["evaluate", str(chosen), "--split", "test", "--data-dir", str(tmp_path / "mine")]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert ("micro_f1" if task == "multilabel" else "spearman") in scores
