"""dwatt.build_record: a feature cache's file says what it holds and how far its build got; a stopped build resumes
after its written batches, a complete one is read as it is, and one written for other contents is built anew."""

from dwatt.build_record import BuildRecord


def test_a_build_resumes_after_its_batches_and_a_file_for_other_contents_starts_again(tmp_path, capsys):
    data = tmp_path / "cache.bin"
    data.write_bytes(b"\0" * 8)
    holds = {"backbone": "b", "dtype": "float16"}
    record = BuildRecord(data, holds)
    assert record.batches_done() == 0 and not record.resumable()
    record.save(3, 10)
    assert record.batches_done() == 3 and record.resumable() and not record.is_complete()
    record.save(10, 10)
    assert record.is_complete() and record.batches_done() == 10
    other = BuildRecord(data, {**holds, "dtype": "bfloat16"})
    assert other.batches_done() == 0 and not other.resumable()
    assert "differing: dtype" in capsys.readouterr().err


def test_processes_building_one_file_each_resume_after_their_own_batches(tmp_path, capsys):
    data = tmp_path / "cache.bin"
    data.write_bytes(b"\0" * 8)
    first, second = (BuildRecord(data, {"k": 1}, share=(rank, 2)) for rank in (0, 1))
    first.start(10)
    first.save(2, 5)
    second.save(4, 5)
    assert (first.batches_done(), second.batches_done()) == (2, 4)
    assert BuildRecord(data, {"k": 1}).batches_done() == 0  # under another number of processes: anew
    assert "ran under 2 processes" in capsys.readouterr().err
    first.finish(10)
    assert BuildRecord(data, {"k": 1}).is_complete() and not list(tmp_path.glob("*.rank*-of-*.json"))
