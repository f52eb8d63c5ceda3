"""Results rows as a table (dwatt.experiment.summaries): rows read from stores and named by file and line where bad,
a run held twice counted once, Student's t intervals, resource tiers."""

import json
import math

import pytest

from dwatt.experiment.summaries import confidence_interval, load_rows, runs_frame, tier

from .helpers import T_975_2_DOF, fair_row, mlm_row


def test_interval_is_the_student_t_half_width():
    assert confidence_interval([0.1, 0.2, 0.3]) == pytest.approx(T_975_2_DOF * 0.1 / math.sqrt(3))
    assert math.isnan(confidence_interval([0.4])) and math.isnan(confidence_interval([]))


def test_tiers_follow_the_training_split_size():
    assert [tier(n) for n in (20000, 10000, 5000, 1000, 100)] == ["high", "medium", "medium", "low", "very low"]


def test_bad_results_rows_are_named_by_file_and_line(tmp_path):
    store = tmp_path / "results.jsonl"
    store.write_text(json.dumps(mlm_row("dwatt", 2.0)) + "\n{broken\n")
    with pytest.raises(ValueError, match=r"results\.jsonl:2: not a JSON results row"):
        load_rows([store])
    store.write_text('{"run_id": "x"}\n')
    with pytest.raises(ValueError, match=r"results\.jsonl:1: a results row needs a 'config'"):
        load_rows([store])
    assert runs_frame([]).empty


def test_a_run_trained_again_by_newer_code_counts_once_as_the_row_that_holds_more():
    """The same run from an older store (no last epoch scored, trained beside other runs) and from a newer one (the
    last epoch, the group's ensembles): the newer row is kept; a row that disagrees on a field both hold is refused."""
    from dwatt.experiment.summaries import without_duplicates

    old = fair_row("base", 0, 1e-3, 0.5, 0.6, 1) | {
        "trained_together": [25] * 5,
        "trained_together_runs": 30,
        "_path": "old.jsonl",
    }
    new = old | {
        "trained_together_runs": 36,
        "last_epoch": {"epoch": 25, "test_scores": {"f1": 0.55}},
        "probe_ensembles": [],
        "_path": "new.jsonl",
    }
    assert without_duplicates([old, new]) == [new] and without_duplicates([new, old]) == [new]
    with pytest.raises(ValueError, match=r"appears twice with different results \(best_dev_f1\)"):
        without_duplicates([old, new | {"best_dev_f1": 0.4}])


def test_a_row_from_before_a_config_field_existed_is_the_same_run_as_one_at_its_default():
    """A store written before `few_shot_dev` existed holds no such field; the run trained again today records it at
    its default: one run, counted once (a probe trained again for its ensembles, beside the grid's), and refused
    where the two disagree (float noise included: the report cannot tell which to believe)."""
    from dwatt.experiment.summaries import run_identity, without_duplicates

    today = fair_row("base", 0, 1e-3, 0.5, 0.6, 1) | {"_path": "new.jsonl"}
    today["config"] = today["config"] | {"few_shot_dev": False}
    before = today | {
        "config": {k: v for k, v in today["config"].items() if k != "few_shot_dev"},
        "_path": "old.jsonl",
    }
    assert run_identity(before) == run_identity(today)
    assert run_identity(today | {"config": today["config"] | {"few_shot_dev": True}}) != run_identity(today)
    assert without_duplicates([before, today]) == [before]
    with pytest.raises(
        ValueError, match=r"appears twice with different results \(best_dev_f1\): at old\.jsonl and at new"
    ):
        without_duplicates([before, today | {"best_dev_f1": 0.50001}])


def test_a_run_trained_again_on_purpose_is_taken_from_the_preferred_store(tmp_path):
    """Two executions of one run that differ by float noise: refused, unless the report is told which store to
    believe (`--prefer`); the row kept says which it was kept over, and a preferred store that is not read is refused."""
    from dwatt.experiment.summaries import PREFERRED_OVER, run_identity

    grid, again = tmp_path / "grid.jsonl", tmp_path / "again.jsonl"
    row = fair_row("base", 0, 1e-3, 0.5, 0.6, 1)
    other = fair_row("dwatt", 0, 1e-3, 0.52, 0.61, 1)
    grid.write_text(json.dumps(row) + "\n" + json.dumps(other) + "\n")
    again.write_text(json.dumps(row | {"best_dev_f1": 0.50001}) + "\n")
    with pytest.raises(ValueError, match="appears twice with different results"):
        load_rows([grid, again])
    for order in ([grid, again], [again, grid]):
        rows = load_rows(order, prefer=[again])
        assert len(rows) == 2 and {run_identity(r) for r in rows} == {run_identity(row), run_identity(other)}
        (kept,) = [r for r in rows if r["config"]["fusion"] == "base"]
        assert kept["best_dev_f1"] == 0.50001 and kept[PREFERRED_OVER] == str(grid)
    with pytest.raises(ValueError, match="--prefer .*elsewhere.jsonl: not among the results files read"):
        load_rows([grid, again], prefer=[tmp_path / "elsewhere.jsonl"])


def test_two_rows_of_one_run_in_one_store_are_named_by_line_and_prefer_takes_one(tmp_path):
    """One store holding a run twice with different results: the refusal names both lines (not the file twice), and
    `--prefer STORE:LINE` takes that row."""
    from dwatt.experiment.summaries import load_rows

    row = fair_row("base", 0, 1e-3, 0.5, 0.6, 1)
    store = tmp_path / "dup-conflict.jsonl"
    store.write_text(
        json.dumps(row)
        + "\n"
        + json.dumps(fair_row("dwatt", 0, 1e-3, 0.4, 0.5, 1))
        + "\n"
        + json.dumps(row | {"best_dev_f1": 0.7})
        + "\n"
    )
    with pytest.raises(
        ValueError,
        match=r"at .*dup-conflict\.jsonl:1 and at .*dup-conflict\.jsonl:3; .* --prefer .*dup-conflict\.jsonl:1",
    ):
        load_rows([store])
    [kept] = [r for r in load_rows([store], prefer=[f"{store}:3"]) if r["config"]["fusion"] == "base"]
    assert kept["best_dev_f1"] == 0.7
    with pytest.raises(ValueError, match=r"--prefer .*:9x: not among the results files read"):
        load_rows([store], prefer=[f"{store}:9x"])
