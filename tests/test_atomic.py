"""Writing files whole or not at all (dwatt.atomic): a failed write leaves the old file and no scratch behind, a folder
is swapped in whole, scratch left by a killed write is cleared, bad bytes and bad JSON are named by file and line."""

import hashlib
import os
from pathlib import Path

import pytest

from dwatt.atomic import (
    give_usual_modes,
    read_json,
    read_text,
    replace_folder,
    scratch_folder,
    sha256_of,
    usual_mode,
    write_text_atomically,
)


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch):
    target = tmp_path / "store.jsonl"
    write_text_atomically(target, "old\n")

    def full_disk(self, text):
        Path.write_bytes(self, text[:2].encode())  # part of it written, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_text_atomically(target, "new\n")
    monkeypatch.undo()
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["store.jsonl"]


@pytest.mark.parametrize("existing", [False, True])
def test_a_folder_is_swapped_in_whole_and_the_old_one_removed(tmp_path, existing):
    target = tmp_path / "model"
    if existing:
        target.mkdir()
        (target / "old.bin").write_text("old")
    with scratch_folder(target) as staging:
        (staging / "new.bin").write_text("new")
        replace_folder(staging, target)
    assert [p.name for p in target.iterdir()] == ["new.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no scratch, no moved-aside old folder


def test_scratch_left_by_a_killed_write_is_cleared_and_a_failed_write_leaves_none(tmp_path):
    target = tmp_path / "export"
    stale = tmp_path / ".export.12345.tmp"
    stale.mkdir()
    (stale / "half.onnx").write_bytes(b"\0" * 10)
    with pytest.raises(RuntimeError):
        with scratch_folder(target) as staging:
            assert staging.name == f".export.{os.getpid()}.tmp" and not stale.exists()
            raise RuntimeError("the export failed")
    assert list(tmp_path.iterdir()) == []


def test_bad_bytes_and_bad_json_are_named_by_file_and_line(tmp_path):
    text = tmp_path / "a.txt"
    text.write_bytes(b"fine\nalso fine\nbad \xff byte\n")
    with pytest.raises(ValueError, match=r"a\.txt:3: not UTF-8"):
        read_text(text)
    config = tmp_path / "c.json"
    config.write_text('{\n  "a": 1,\n  "b": \n}\n')
    with pytest.raises(ValueError, match=r"c\.json:4: not JSON"):
        read_json(config)


def test_files_written_private_get_the_usual_mode_and_their_sha256(tmp_path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights" * 1000)
    weights.chmod(0o600)  # as transformers writes it
    give_usual_modes(tmp_path)
    assert weights.stat().st_mode & 0o777 == usual_mode()
    assert sha256_of(weights) == hashlib.sha256(weights.read_bytes()).hexdigest()
