"""Results stores (dwatt.experiment.store): appends of one line, a row a crash cut off left out, committed stores read as today's runs, bad rows named."""

import pytest

from dwatt.experiment.store import ResultsStore


def test_store_appends_a_line_and_names_a_bad_one(tmp_path):
    store = ResultsStore(tmp_path / "results.jsonl")
    store.append({"run_id": "a", "f1": 0.5})
    store.append({"run_id": "b", "f1": 0.6})
    assert [r["run_id"] for r in store.rows()] == ["a", "b"] and store.done() == {"a", "b"}
    assert [p.name for p in tmp_path.iterdir()] == ["results.jsonl"]  # no temporary file left behind
    store.path.write_text(store.path.read_text() + '{"run_id": "c", "f1"\n')
    with pytest.raises(ValueError, match=r"results\.jsonl:3: not a JSON row"):
        store.rows()


def test_an_append_leaves_the_rows_there_untouched(tmp_path, monkeypatch):
    """An append writes its own line and nothing else: the bytes before it stay as they were (not read back and
    written again), whatever the store holds."""
    store = ResultsStore(tmp_path / "results.jsonl")
    for index in range(50):
        store.append({"run_id": f"run-{index}", "f1": index / 100})
    before = store.path.read_bytes()
    written = []
    real_open = type(store.path).open

    def spy(path, mode="r", *args, **kwargs):
        assert "w" not in mode, f"the store was opened to be written whole ({mode!r})"
        handle = real_open(path, mode, *args, **kwargs)
        if "a" in mode:
            write = handle.write
            handle.write = lambda data: written.append(len(data)) or write(data)
        return handle

    monkeypatch.setattr(type(store.path), "open", spy)
    store.append({"run_id": "last", "f1": 1.0})
    after = store.path.read_bytes()
    assert after.startswith(before) and written == [len(after) - len(before)]


def test_a_row_a_crash_cut_off_is_no_run_and_the_next_append_cuts_it_off(tmp_path):
    """A last line without its line end that does not parse is a write a crash interrupted: the run was not finished
    (the reader and the report leave it out), and the next append starts on a line of its own. A bad line with a
    line end, or one followed by more rows, is still an error."""
    from dwatt.experiment.summaries import load_rows

    store = ResultsStore(tmp_path / "results.jsonl")
    config = {"backbone": "b", "mode": "fe", "fusion": "base", "epochs": 1}
    store.append({"run_id": "a", "config": config})
    store.path.write_bytes(store.path.read_bytes() + b'{"run_id": "b", "conf')
    assert [row["run_id"] for row in store.rows()] == ["a"]
    assert [row["run_id"] for row in load_rows([store.path])] == ["a"]
    store.append({"run_id": "c", "config": config})
    assert [row["run_id"] for row in store.rows()] == ["a", "c"]
    assert store.path.read_text().count("\n") == 2
    store.path.write_bytes(store.path.read_bytes() + b'{"run_id": "d", "config": {}}')  # whole, without its line end
    store.append({"run_id": "e", "config": config})
    assert [row["run_id"] for row in store.rows()] == ["a", "c", "d", "e"]  # kept, not cut off
    store.path.write_bytes(store.path.read_bytes() + b'{"run_id": "d", "conf\n{"run_id": "e"}\n')
    with pytest.raises(ValueError, match=r"results\.jsonl:5: not a JSON row"):
        store.rows()


def test_committed_stores_read_as_todays_runs():
    """Every row of every committed store is the run its spec asks for today (the identity's fields its code did not
    know yet at their defaults): a resumed grid skips them all. A backbone's fingerprint is compared where its folder
    is on this machine; a clone without the weights (CI) checks the rest of the identity."""
    from pathlib import Path

    from dwatt.experiment.grid import RunSpec
    from dwatt.experiment.store import differences, requested_settings, row_settings, same_run

    stores = sorted(Path(__file__).parents[1].glob("docs/results/**/*.jsonl"))
    assert len(stores) >= 10
    for path in stores:
        for row in ResultsStore(path).rows():
            # what a sweep's own options set (--cache-dtype, --test, --few-shot-dev), as the row was run
            overrides = {key: row["config"][key] for key in ("cache_dtype", "evaluate_test")}
            overrides["few_shot_dev"] = row["config"].get("few_shot_dev", False)
            spec = RunSpec(**row["spec"])
            wanted, theirs = requested_settings(spec, overrides), row_settings(row, spec.backbone)
            if wanted["backbone_sha256"] is None:
                theirs = theirs | {"backbone_sha256": None}
            assert same_run(theirs, wanted), f"{path}: {row['run_id']}: {differences(theirs, wanted)}"


@pytest.mark.parametrize(
    "line, named",
    [
        ("[1, 2]", r"r\.jsonl:2: expected a JSON object per line, got list"),
        ('{"f1": 0.5}', r"r\.jsonl:2: a store row needs a 'run_id'"),
    ],
)
def test_a_store_row_of_another_shape_is_named(tmp_path, line, named):
    store = tmp_path / "r.jsonl"
    store.write_text('{"run_id": "a"}\n' + line + "\n")
    with pytest.raises(ValueError, match=named):
        ResultsStore(store).rows()
