"""The word-readout table (`dwatt.experiment.readouts`): each readout's dev choice per trial, paired against the first
sub-token's, judged ahead, behind, within the margin or not shown, Holm over the table's pairs."""

import math

import pytest

from dwatt.experiment.readouts import readout_choices, readout_table
from dwatt.experiment.significance import EQUIVALENCE_MARGIN as MARGIN
from dwatt.experiment.summaries import runs_frame

from .helpers import readout_rows as rows


def test_each_readout_is_judged_against_the_first_sub_tokens_on_the_same_trials():
    choices = readout_choices(runs_frame(rows()))
    assert len(choices) == 4 * 3 and set(choices.layer) == {2} and set(choices.learning_rate) == {1e-3}
    table = readout_table(choices).set_index("readout")
    assert table.loc["last", "minus_first"] == pytest.approx(5.0, abs=1e-6)
    assert table.loc["last", "verdict"] == "beats"  # five points in every trial, little spread
    assert table.loc["mean", "verdict"] == "within"  # a tenth of a point either way: inside ±1
    assert abs(table.loc["mean", "minus_first"]) < MARGIN
    assert table.loc["echo-mean", "verdict"] == "level"  # -10 to +20 over three trials says neither
    assert table.loc["first", "verdict"] == "" and math.isnan(table.loc["first", "p"])
    assert table.p_holm.notna().sum() == 3  # the family: the three pairs against first
    assert list(table.index) == ["first", "last", "mean", "echo-mean"]
