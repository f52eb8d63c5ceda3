"""Numbers and names as the report prints them (dwatt.experiment.table_text)."""

import math

import pandas as pd

from dwatt.experiment.table_text import dev_size_words, markdown, trials_text, with_interval, words


def test_numbers_names_and_pipe_tables():
    assert with_interval(1.234, 0.5) == "1.23 ± 0.50" and with_interval(1.0, math.nan, sign=True) == "+1.00"
    assert trials_text(1) == "1 trial" and trials_text(3) == "3 trials"
    assert words(["a"]) == "a" and words(["a", "b", "c"]) == "a, b and c"
    assert markdown(pd.DataFrame({"x": [1, None], "y": ["a", "b"]})) == "| x | y |\n|---|---|\n| 1.0 | a |\n|  | b |\n"
    assert dev_size_words(pd.DataFrame({"metric": ["F1"], "dev_sentences": [200.0]})).startswith("a dev set of 200")
