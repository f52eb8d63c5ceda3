"""Results stores (dwatt.experiment.store): atomic rewrites, committed stores read as today's runs, bad rows named."""

import pytest

from dwatt.experiment.store import ResultsStore


def test_store_rewrites_atomically_and_names_a_bad_line(tmp_path):
    store = ResultsStore(tmp_path / "results.jsonl")
    store.append({"run_id": "a", "f1": 0.5})
    store.append({"run_id": "b", "f1": 0.6})
    assert [r["run_id"] for r in store.rows()] == ["a", "b"] and store.done() == {"a", "b"}
    assert [p.name for p in tmp_path.iterdir()] == ["results.jsonl"]  # no temporary file left behind
    store.path.write_text(store.path.read_text() + '{"run_id": "c", "f1"\n')
    with pytest.raises(ValueError, match=r"results\.jsonl:3: not a JSON row"):
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
