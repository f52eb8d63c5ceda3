"""The coverage table (dwatt.experiment.coverage): the runs the stores hold against the grid their rows span."""

import json

from dwatt.experiment.report import write_report

from .helpers import fair_row, window_grid_rows


def test_the_coverage_table_counts_the_runs_held_against_the_grid_the_rows_span(tmp_path):
    rows = [
        fair_row("base", trial, rate, 0.5, 0.5, layer)
        for trial in range(3)
        for layer in (1, 2, 3)
        for rate in (1e-4, 1e-3)
    ]
    rows += [fair_row("dwatt", trial, rate, 0.6, 0.6) for trial in range(3) for rate in (1e-4, 1e-3)]
    rows += [fair_row("dwatt", 0, 1e-2, 0.6, 0.6)]  # past the grid's edge, in one trial
    rows += [fair_row("base", 0, 1e-4, 0.5, 0.5, layer, n=128) for layer in (1, 2)]  # N = 128: a probe begun
    store = tmp_path / "fair.jsonl"
    store.write_text("".join(json.dumps(row) + "\n" for row in rows))
    write_report([store], tmp_path / "out", title="fair")
    table = (tmp_path / "out" / "tables" / "coverage.md").read_text().splitlines()
    assert table[2:] == [
        "| backbone | dataset | N | Base (probe) | DWAtt |",
        "|---|---|---|---|---|",
        "| deep | conll2003 | 32 | 3/3 | 1/3 (7/9 runs) |",
        "| deep | conll2003 | 128 | 0/3 (2/18 runs) | 0/3 (0/9 runs) |",
    ]
    assert "## Coverage" in (tmp_path / "out" / "report.md").read_text()


def test_coverage_counts_a_method_whose_runs_have_only_begun_against_the_whole_grid():
    from dwatt.experiment.coverage import coverage
    from dwatt.experiment.summaries import runs_frame

    rows = [fair_row("base", 0, rate, 0.5, 0.5, layer) for layer in (1, 2, 3) for rate in (1e-4, 1e-3, 1e-2)]
    rows += [fair_row("concat", 0, rate, 0.5, 0.5) for rate in (1e-4, 1e-3, 1e-2)]
    rows += [fair_row("dwatt", 0, 1e-4, 0.5, 0.5)]  # one rate of three so far
    covered = coverage(runs_frame(rows)).set_index("method")
    assert covered.loc["DWAtt"].planned_runs == 3 and covered.loc["DWAtt"].complete_trials == 0
    assert covered.loc["Concat"].complete_trials == 1 and covered.loc["Base (probe)"].planned_runs == 9


def test_rates_a_few_methods_reached_on_one_backbone_are_not_the_grid_s():
    """Three of four methods went on to 1e-2 on one backbone (they chose the largest rate there), none on the other:
    counted per backbone, 1e-2 is not the grid's, so Concat (never extended) is complete where it ran two rates."""
    from dwatt.experiment.coverage import coverage
    from dwatt.experiment.summaries import runs_frame

    def on(backbone, row):
        row["config"]["backbone"] = backbone
        return row

    rows = []
    for backbone in ("/m/deep", "/m/other"):
        extended = backbone == "/m/deep"
        for fusion in ("scalar_mix", "dwatt", "base_plus_n", "concat"):
            rates = (1e-4, 1e-3, 1e-2) if extended and fusion != "concat" else (1e-4, 1e-3)
            rows += [on(backbone, fair_row(fusion, 0, rate, 0.5, 0.5)) for rate in rates]
        rows += [
            on(backbone, fair_row("base", 0, rate, 0.5, 0.5, layer)) for layer in (1, 2, 3) for rate in (1e-4, 1e-3)
        ]
    covered = coverage(runs_frame(rows)).set_index(["backbone", "method"])
    assert (
        covered.loc[("deep", "Concat"), "complete_trials"] == 1
        and covered.loc[("deep", "Concat"), "planned_runs"] == 2
    )
    assert covered.loc[("deep", "DWAtt"), "planned_runs"] == 3 and covered.loc[("other", "DWAtt"), "planned_runs"] == 2


def test_a_window_is_not_planned_where_it_would_be_every_layer():
    """A 4-layer backbone whose probe chooses layer 1: the window 1-3 and the last is every layer, so the coverage
    plans no window run with the last layer there; the window alone (only:1-3) it plans."""
    from dwatt.experiment.coverage import coverage
    from dwatt.experiment.methods import window_methods
    from dwatt.experiment.summaries import runs_frame

    rows = [
        row | {"backbone_layers": 4}
        for row in window_grid_rows()
        if row["config"]["fusion"] != "base" or int(row["config"]["layers"]) <= 4
    ]
    covered = coverage(runs_frame(rows)).set_index("method")
    assert window_methods()["scalar_mix", False] not in covered.index
    assert covered.loc[window_methods()["scalar_mix", True], "trials"] == 2


def test_coverage_counts_windows_around_both_choices_and_only_those():
    """A window grid with few-shot dev samples plans the windows around the probe's choice on dev (layer 6: 4-8) and
    on each trial's sample (layer 3: 1-5); runs on a window that neither choice makes (a probe run again that chose
    otherwise) do not count."""
    from dwatt.experiment.coverage import coverage
    from dwatt.experiment.methods import window_methods
    from dwatt.experiment.summaries import runs_frame

    method = window_methods()["scalar_mix", False]
    rows = window_grid_rows()
    covered = coverage(runs_frame(rows)).set_index("method")
    assert covered.loc[method, ["complete_trials", "trials", "runs", "planned_runs"]].tolist() == [2, 2, 8, 8]
    around_dev_only = [row for row in rows if row["config"]["layers"] not in ("1-5", "only:1-5")]
    moved = [row | {"config": row["config"] | {"layers": "2-6"}} for row in rows if row["config"]["layers"] == "1-5"]
    covered = coverage(runs_frame(around_dev_only + moved)).set_index("method")
    assert covered.loc[method, ["complete_trials", "trials", "runs", "planned_runs"]].tolist() == [0, 2, 4, 8]


def test_rates_past_the_grid_shared_by_many_methods_do_not_outvote_the_grid():
    """Three backbones: the probe and Concat at the grid's five rates, ScalarMix and DWAtt widened to a sixth where
    they chose the largest, ScalarMix+LN planned with seven from the start. The sixth rate is in most methods' rates,
    yet the set most often tried whole is the grid's five: Concat is complete there, and each widened method is
    counted against its own six."""
    from dwatt.experiment.coverage import coverage
    from dwatt.experiment.summaries import runs_frame

    grid, sixth, seventh = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2), 3e-2, 1e-1

    def on(backbone, row):
        row["config"]["backbone"] = backbone
        return row

    rows = []
    for backbone in ("/m/a", "/m/b", "/m/c"):
        rows += [on(backbone, fair_row("base", 0, rate, 0.5, 0.5, layer)) for layer in (1, 2) for rate in grid]
        rows += [on(backbone, fair_row("concat", 0, rate, 0.5, 0.5)) for rate in grid]
        rows += [on(backbone, fair_row("scalar_mix_layer_norm", 0, r, 0.5, 0.5)) for r in (*grid, sixth, seventh)]
        widened = ("scalar_mix", "dwatt") if backbone != "/m/c" else ("scalar_mix",)
        rows += [on(backbone, fair_row(fusion, 0, rate, 0.5, 0.5)) for fusion in widened for rate in (*grid, sixth)]
    covered = coverage(runs_frame(rows)).set_index(["backbone", "method"])
    assert (covered.loc[("a", "Concat"), ["planned_runs", "complete_trials"]] == [5, 1]).all()
    assert (covered.loc[("a", "ScalarMix"), ["planned_runs", "complete_trials"]] == [6, 1]).all()
    assert (covered.loc[("c", "ScalarMix+LN"), ["planned_runs", "complete_trials"]] == [7, 1]).all()
