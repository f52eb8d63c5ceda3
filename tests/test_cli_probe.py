"""dwatt probe (dwatt.cli.probe): its options and defaults, read into the probe's settings. The probe end to end (NER,
classification files, a decoder, resuming): test_experiment_probe."""

from dataclasses import fields

import pytest

from dwatt.cli import build_parser
from dwatt.experiment.probe import PROBE_LEARNING_RATES, ProbeSettings


def test_the_probe_s_defaults_and_its_options_reach_its_settings():
    args = build_parser().parse_args(["probe"])
    assert args.learning_rates == PROBE_LEARNING_RATES and (args.task, args.n_shot, args.layers) == ("ner", 32, "all")
    assert (args.widen, args.baselines) == (3, True)
    args = build_parser().parse_args(
        [
            "probe",
            "--task",
            "cls",
            "--learning-rates",
            "1e-3,,3e-3",
            "--no-save",
            "--pooling",
            "last",
            "--layers",
            "every:2",
            "--widen",
            "0",
            "--no-baselines",
        ]
    )
    assert (args.learning_rates, args.save_model, args.pooling, args.layers, args.widen, args.baselines) == (
        (1e-3, 3e-3),
        False,
        "last",
        "every:2",
        0,
        False,
    )
    settings = {f.name for f in fields(ProbeSettings)}
    unread = {name for name in vars(args) if name not in settings} - {"command", "handler", "quiet", "threads"}
    assert unread == set()  # every option reaches the probe (quiet as its progress, threads before it starts)


@pytest.mark.parametrize("argv", [["--task", "mlm"], ["--pooling", "max"], ["--cache-dtype", "int8"]])
def test_a_choice_the_probe_does_not_offer_is_refused(argv, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["probe", *argv])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["probe", "--backbone"]])
def test_a_backbone_written_as_a_missing_folder_is_refused_before_anything_loads(command, capsys):
    """As `dwatt train` refuses it: the folder named, on a line of its own, not the Hub client's "Repo id must be in
    the form ..." after the data loaded."""
    from dwatt.cli import main

    option = command[-1]
    for missing in ("/no/such/folder", "./nothing-here"):
        assert main([*command, missing]) == 2
        assert capsys.readouterr().err == f"dwatt {command[0]}: error: {option}: no model folder {missing}\n"
