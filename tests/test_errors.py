"""The errors a command reports in one line (dwatt.errors): what `first_line` keeps of a message, and that the command
line turns each of them into one line and exit status 2. Where they are raised: test_cli_sweep (a busy store),
test_cli_push (the Hub)."""

import pytest

from dwatt.cli import main
from dwatt.errors import HubError, SweepBusyError, first_line


def test_first_line_keeps_a_message_s_first_line_or_names_the_error_that_says_nothing():
    assert (
        first_line(ValueError("  a.jsonl:3: not an object\n  the rest of the story\n")) == "a.jsonl:3: not an object"
    )
    assert first_line(HubError("")) == "HubError" and first_line(OSError()) == "OSError"


@pytest.mark.parametrize(
    "error",
    [
        HubError("403: you may not write to 'someone/run'\ndetails"),
        SweepBusyError("r.jsonl: another sweep is writing this results file\npid 7"),
    ],
)
def test_the_command_line_reports_each_error_in_one_line_and_exits_2(error, monkeypatch, capsys):
    def fail(args):
        raise error

    monkeypatch.setattr("dwatt.cli.report.run", fail)
    assert main(["report", "a.jsonl", "--output", "out"]) == 2
    err = capsys.readouterr().err
    assert err == f"dwatt report: error: {str(error).splitlines()[0]}\n"


def test_an_error_the_command_line_does_not_expect_is_not_swallowed(monkeypatch):
    def fail(args):
        raise KeyError("a bug")

    monkeypatch.setattr("dwatt.cli.report.run", fail)
    with pytest.raises(KeyError):
        main(["report", "a.jsonl", "--output", "out"])
