"""dwatt export (dwatt.cli.export): an export records every file's sha256, a re-export that fails leaves the old one, and
weights that are not finite are not exported. The export itself: test_serving_export; running it: test_onnx_runtime."""

import json
from pathlib import Path

import pytest
import torch

from dwatt.cli import main

from .helpers import files_of, fresh_copy


def test_an_export_records_every_file_s_sha256_and_a_re_export_that_fails_leaves_the_old_one(
    checkpoints, exported_ner, tmp_path, monkeypatch, capsys
):
    from dwatt.atomic import sha256_of

    folder = fresh_copy(exported_ner, tmp_path)
    config = json.loads((folder / "dwatt_export.json").read_text())
    assert config["sha256"] == {
        path.name: sha256_of(path) for path in folder.iterdir() if path.name != "dwatt_export.json"
    }
    assert {"model.onnx", "model_int8.onnx", "tokenizer.json", "config.json"} <= set(config["sha256"])
    before = files_of(folder)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # what a signal does part-way, after the new fp32 graph is written

    monkeypatch.setattr("dwatt.serving.export.quantize_onnx", killed)
    with pytest.raises(KeyboardInterrupt):
        main(["export", str(checkpoints["cls"]), str(folder), "--quantize", "int8"])
    assert files_of(folder) == before and [p.name for p in tmp_path.iterdir()] == ["copy"]  # no scratch left
    monkeypatch.undo()
    assert main(["export", str(checkpoints["cls"]), str(folder)]) == 0  # a re-export replaces the folder whole
    assert json.loads((folder / "dwatt_export.json").read_text())["task"] == "cls"
    assert not (folder / "model_int8.onnx").exists()
    capsys.readouterr()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    assert main(["export", str(checkpoints["ner"]), str(tmp_path / "mine")]) == 2
    assert (
        "mine: not an export folder (no dwatt_export.json), and exporting would replace it" in capsys.readouterr().err
    )
    assert (tmp_path / "mine" / "notes.txt").read_text() == "x"


def test_non_finite_weights_are_not_exported(checkpoints, tmp_path, capsys):
    import shutil

    from safetensors.torch import load_file, save_file

    broken = Path(shutil.copytree(checkpoints["cls"], tmp_path / "nan"))
    weights = load_file(str(broken / "model.safetensors"))
    weights = {
        key: torch.full_like(value, float("nan")) if key.startswith(("classifier", "out_proj")) else value
        for key, value in weights.items()
    }
    save_file(weights, str(broken / "model.safetensors"), metadata={"format": "pt"})
    assert main(["export", str(broken), str(tmp_path / "onnx")]) == 2
    assert "its logits on the check batch are not finite" in capsys.readouterr().err
    assert not (tmp_path / "onnx").exists()


def test_an_export_onto_a_full_disk_is_one_line_naming_the_folder(
    checkpoints, exported_ner, tmp_path, monkeypatch, capsys
):
    """numpy's "problem writing element N to file" (no errno) on a full disk: one line that names the export and says
    the disk is full; the earlier export is kept, no scratch stays."""
    import shutil
    from collections import namedtuple

    folder = fresh_copy(exported_ner, tmp_path)
    before = files_of(folder)

    def full(*args, **kwargs):
        raise OSError("problem writing element 346112 to file")

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr("dwatt.serving.export.write_graph", full)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10 << 30, 10 << 30, 4096))
    capsys.readouterr()
    assert main(["export", str(checkpoints["ner"]), str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and f"{folder}: no space left on the device while writing the export (0.0 MiB free" in err[0]
    ), err
    assert "problem writing element 346112" in err[0] and "nothing was replaced" in err[0]
    assert files_of(folder) == before and sorted(p.name for p in tmp_path.iterdir()) == ["copy"]


def test_two_exports_to_one_folder_at_once_the_second_is_refused_and_the_first_s_scratch_kept(
    checkpoints, tmp_path, capsys
):
    """A second export to a folder another process is writing is refused in one line; it no longer removes the first
    one's scratch folder (which it took for a killed export's)."""
    from filelock import FileLock

    output = tmp_path / "onnx"
    scratch = tmp_path / ".onnx.999999.tmp"
    scratch.mkdir()  # the first export's scratch, being written
    first = FileLock(tmp_path / ".onnx.lock")
    first.acquire()  # held by the first export
    capsys.readouterr()
    assert main(["export", str(checkpoints["ner"]), str(output)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "onnx: another process is writing this folder now" in err[0], err
    assert scratch.is_dir() and not output.exists()
    first.release()
    assert (
        main(["export", str(checkpoints["ner"]), str(output)]) == 0
    )  # once it ended: its leftovers are a killed one's
    assert not scratch.exists() and not (tmp_path / ".onnx.lock").exists()
    capsys.readouterr()


@pytest.mark.parametrize("time_vs_fp32, says", [(1.32, True), (0.64, False)])
def test_an_int8_graph_slower_than_fp32_on_this_cpu_is_said_to_be(monkeypatch, capsys, tmp_path, time_vs_fp32, says):
    """The export keeps the fastest int8 graph that keeps the answers; where even that one is slower than fp32 on the
    exporting CPU, its last line says to serve the fp32 graph there."""
    import dwatt.serving.export

    candidate = {"scheme": "weights", "agreement": 0.985, "unit": "words", "time_vs_fp32": time_vs_fp32}
    config = {
        "graphs": {None: "model.onnx", "int8": "model_int8.onnx"},
        "task": "ner",
        "fusion": "base",
        "check": {"max_abs_logit_difference": 0.0},
        "int8": candidate | {"calibration": "128 sentences", "candidates": [candidate]},
    }
    monkeypatch.setattr(dwatt.serving.export, "export_onnx", lambda *args, **kwargs: config)
    assert main(["export", str(tmp_path / "model"), str(tmp_path / "onnx"), "--quantize", "int8"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"int8 (weights): 98.5% of words as fp32 on 128 sentences, {time_vs_fp32:.2f}x fp32's time" in last
    assert ("slower than fp32 here: serve the fp32 graph on this CPU" in last) is says
