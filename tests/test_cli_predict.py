"""dwatt predict (dwatt.cli.predict): outputs stream chunk by chunk in input order, a bar on stderr for long files
unless --quiet, sentences after the options. What a line in gives out: test_lines; batching: test_prediction; an ONNX
export: test_onnx_runtime."""

import io
import json

import pytest

from dwatt.cli import main

from .conftest import WORDS
from .helpers import SENTENCES


def test_cli_predict_writes_in_input_order_streaming_chunk_by_chunk(checkpoints, tmp_path, monkeypatch, capsys):
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
    assert (
        main(["predict", str(checkpoints["ner"]), "--jsonl", str(tmp_path / "in.txt"), "--batch-size", "4", "--quiet"])
        == 0
    )
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [row["text"] for row in rows] == lines[:20] + [""] + lines[20:]  # input order, the empty line kept
    assert [row["line"] for row in rows] == list(range(1, 42)) and rows[20]["words"] == rows[20]["tags"] == []
    rows = rows[:20] + rows[21:]
    assert (
        calls == [8, 8, 7, 8, 8, 1] and written_after[0] == 1
    )  # the first chunk is written before the second is tagged
    assert "1 blank lines, each given an empty record" in capsys.readouterr().err
    # The same tags as each sentence alone through the command.
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert main(["predict", str(checkpoints["ner"]), lines[3], "--jsonl", "/dev/null"]) == 0
    assert json.loads(__import__("sys").stdout.getvalue().splitlines()[0])["tags"] == rows[3]["tags"]


def test_cli_predict_shows_a_bar_on_stderr_for_long_files_unless_quiet(checkpoints, tmp_path, capsys):
    (tmp_path / "long.txt").write_text("\n".join(" ".join(WORDS[: 1 + i % 5]) for i in range(301)) + "\n")
    assert (
        main(["predict", str(checkpoints["ner"]), "--file", str(tmp_path / "long.txt"), "--jsonl", "/dev/null"]) == 0
    )
    out, err = capsys.readouterr()
    assert "predicting" in err and len(out.splitlines()) == 301 and all(json.loads(line) for line in out.splitlines())
    assert main(["predict", str(checkpoints["ner"]), "--file", str(tmp_path / "long.txt"), "--quiet"]) == 0
    assert "predicting" not in capsys.readouterr().err
    (tmp_path / "blank.txt").write_text("\n\n")
    assert main(["predict", str(checkpoints["ner"]), "--file", str(tmp_path / "blank.txt")]) == 2
    assert "nothing to predict" in capsys.readouterr().err


def test_sentences_may_follow_the_options(checkpoints, capsys):
    assert main(["predict", str(checkpoints["ner"]), "peter", "--batch-size", "2", "eu", "brussels"]) == 0
    words = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert words == ["peter", "eu", "brussels"]
    with pytest.raises(SystemExit):
        main(["predict", str(checkpoints["ner"]), "peter", "--no-such-option"])
