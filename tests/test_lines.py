"""`dwatt predict`'s lines in and out (dwatt.serving.lines): every input line gets exactly one output line in its
place (blank lines, CRLF, a lone CR, stdin as a file), outputs stream chunk by chunk in input order, a bar on stderr
for long files, sentences after the options."""

import io
import json

import pytest
import torch
from transformers import AutoTokenizer

from dwatt import DWAttForMaskedLM, DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.cli import main

from .conftest import WORDS, save_tiny_backbone
from .helpers import SENTENCES, with_random_head


def rounded(value):
    if isinstance(value, float):
        return round(value, 5)
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    return [rounded(item) for item in value] if isinstance(value, list) else value


@pytest.fixture(scope="module")
def tagger(saved_models):
    return saved_models["ner"]


def test_cli_predict_writes_in_input_order_streaming_chunk_by_chunk(tagger, tmp_path, monkeypatch, capsys):
    import dwatt.serving.prediction

    lines = [" ".join(SENTENCES[i % len(SENTENCES)][: 1 + i % 7]) for i in range(40)]
    (tmp_path / "in.txt").write_text("\n".join(lines[:20]) + "\n\n" + "\n".join(lines[20:]) + "\n")
    monkeypatch.setattr("dwatt.cli.predict.CHUNK_BATCHES", 2)  # chunks of 2 batches of 4 lines
    calls, written_after = [], []
    original = dwatt.serving.prediction.predict_tags

    def counting(*args, **kwargs):
        calls.append(len(args[2]))
        return original(*args, **kwargs)

    monkeypatch.setattr("dwatt.serving.prediction.predict_tags", counting)

    class Recording(io.StringIO):
        def write(self, text):
            written_after.append(len(calls))
            return super().write(text)

    out = Recording()
    monkeypatch.setattr("sys.stdout", out)
    assert main(["predict", str(tagger), "--jsonl", str(tmp_path / "in.txt"), "--batch-size", "4", "--quiet"]) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [row["text"] for row in rows] == lines[:20] + [""] + lines[20:]  # input order, the empty line kept
    assert [row["line"] for row in rows] == list(range(1, 42)) and rows[20]["words"] == rows[20]["tags"] == []
    rows = rows[:20] + rows[21:]
    assert calls == [8, 8, 7, 8, 8, 1] and written_after[0] == 1  # the first chunk is written before the second is tagged
    assert "1 blank lines, each given an empty record" in capsys.readouterr().err
    # The same tags as each sentence alone through the command.
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert main(["predict", str(tagger), lines[3], "--jsonl", "/dev/null"]) == 0
    assert json.loads(__import__("sys").stdout.getvalue().splitlines()[0])["tags"] == rows[3]["tags"]


def test_cli_predict_shows_a_bar_on_stderr_for_long_files_unless_quiet(tagger, tmp_path, capsys):
    (tmp_path / "long.txt").write_text("\n".join(" ".join(WORDS[: 1 + i % 5]) for i in range(301)) + "\n")
    assert main(["predict", str(tagger), "--file", str(tmp_path / "long.txt"), "--jsonl", "/dev/null"]) == 0
    out, err = capsys.readouterr()
    assert "predicting" in err and len(out.splitlines()) == 301 and all(json.loads(line) for line in out.splitlines())
    assert main(["predict", str(tagger), "--file", str(tmp_path / "long.txt"), "--quiet"]) == 0
    assert "predicting" not in capsys.readouterr().err
    (tmp_path / "blank.txt").write_text("\n\n")
    assert main(["predict", str(tagger), "--file", str(tmp_path / "blank.txt")]) == 2
    assert "nothing to predict" in capsys.readouterr().err


@pytest.fixture(scope="module")
def saved_models(tiny_backbone, tmp_path_factory) -> dict:
    """A saved tagger (two), classifier and masked LM on the tiny backbone, with its tokenizer (read, never changed,
    by the tests of this module)."""
    folders = {}
    tmp_path = tmp_path_factory.mktemp("lines-models")
    torch.manual_seed(0)
    mlm_backbone = save_tiny_backbone(tmp_path / "mlm-backbone", "bert")
    for task, model in (
        ("ner", DWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=7)),
        ("ner-2", DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="concat", num_labels=7)),
        ("cls", DWAttForSequenceClassification.from_backbone(str(tiny_backbone), num_labels=3)),
        ("mlm", DWAttForMaskedLM.from_backbone(str(mlm_backbone))),
    ):
        folders[task] = tmp_path / task
        with_random_head(model).save_pretrained(folders[task])
        AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(folders[task])
    return folders


LINES = ["", "peter blackburn [MASK]", "  ", "eu rejects [MASK] call", "", "brus\rsels [MASK]", "lamb [MASK]", "", " "]


RAW = "\r\n".join(LINES)


@pytest.mark.parametrize("task", ["ner", "cls", "mlm", "heads"])
@pytest.mark.parametrize("form", ["file", "jsonl"])
def test_every_input_line_gets_exactly_one_output_line_in_its_place(task, form, saved_models, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_bytes(RAW.encode())
    blank = [not line.strip() for line in LINES]
    if task == "heads":
        argv = ["predict", "--heads", f"{saved_models['ner']},{saved_models['ner-2']}"]
    else:
        argv = ["predict", str(saved_models[task])]
    assert main([*argv, f"--{form}", str(source), "--quiet"]) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert out.endswith("\n") and "\r\n" not in out  # lines end at \n; a lone \r inside a line is echoed as read
    printed = out[:-1].split("\n")
    assert len(printed) == len(LINES) == 9 and f"{sum(blank)} blank lines, each given an empty record" in err
    alone = {}  # each non-blank line run alone, in the same form
    for number, line in enumerate(LINES, start=1):
        if not blank[number - 1]:
            (tmp_path / "one.txt").write_text(line + "\n", newline="")
            assert main([*argv, f"--{form}", str(tmp_path / "one.txt"), "--quiet"]) == 0
            alone[number] = capsys.readouterr().out[:-1]
    for number, (line, output) in enumerate(zip(LINES, printed), start=1):
        if form == "file":
            assert (output == "") if blank[number - 1] else (output == alone[number]), (number, output)
            if task == "ner" and not blank[number - 1]:
                assert len(output.split()) == len(line.split())  # a tag per word
            continue
        record, expected = json.loads(output), None if blank[number - 1] else json.loads(alone[number])
        assert record["line"] == number and record["text"] == line
        if expected is None:  # an empty record: the task's fields, empty
            heads = {"ner": [], "ner-2": []}  # named by their folders
            empty = {"ner": {"words": [], "tags": []}, "heads": {"words": [], "tags": heads},
                     "cls": {"label": None, "scores": {}}, "mlm": {"masks": []}}[task]
            assert record == {"line": number, "text": line} | empty
        else:  # as the line alone (probabilities to float rounding: the batch differs)
            assert rounded(record | {"line": 0}) == rounded(expected | {"line": 0})


def test_stdin_lines_end_at_newline_only_as_in_a_file(saved_models, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(RAW.encode()), encoding="utf-8"))
    assert main(["predict", str(saved_models["cls"]), "--jsonl", "--quiet"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [record["text"] for record in records] == LINES and [r["line"] for r in records] == list(range(1, 10))
    assert [record["label"] is None for record in records] == [not line.strip() for line in LINES]


def test_sentences_may_follow_the_options(saved_models, capsys):
    assert main(["predict", str(saved_models["ner"]), "peter", "--batch-size", "2", "eu", "brussels"]) == 0
    words = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert words == ["peter", "eu", "brussels"]
    with pytest.raises(SystemExit):
        main(["predict", str(saved_models["ner"]), "peter", "--no-such-option"])
