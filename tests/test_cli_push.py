"""dwatt push (dwatt.cli.push): a finished run goes to the Hub (at the HfApi boundary, offline), and every way the Hub can
fail ends in one line that says what to do."""

import json
from pathlib import Path

import pytest

from dwatt import RobertaDWAttForTokenClassification
from dwatt.cli import main

from .helpers import RUN_RESULTS, RecordingApi


def test_cli_push_sends_a_finished_run(tiny_backbone, tmp_path, monkeypatch, capsys):
    run = finished_run(tiny_backbone, tmp_path)
    recorder = RecordingApi()
    monkeypatch.setattr("dwatt.hub.HfApi", lambda *a, **k: recorder)
    assert (
        main(["push", str(run), "someone/run", "--commit-message", "first head", "--backbone-id", "someone/tiny-bert"])
        == 0
    )
    assert recorder.calls[-1][2]["commit_message"] == "first head"
    assert "tokenizer.json" in recorder.calls[-1][2]["files"]
    assert main(["push", str(tmp_path / "nothing"), "someone/run"]) == 2
    assert "not a finished run" in capsys.readouterr().err


def hub_http_client():
    """The HTTP client module huggingface_hub uses (httpx, or httpx2 in later releases)."""
    import importlib

    from huggingface_hub import errors

    return importlib.import_module(errors.Response.__module__.split(".")[0])


def finished_run(backbone, tmp_path) -> Path:
    """What `dwatt train` leaves: model/ (with a tokenizer) and results.json."""
    from transformers import BertTokenizerFast

    run = tmp_path / "run"
    RobertaDWAttForTokenClassification.from_backbone(str(backbone), num_labels=5).save_pretrained(run / "model")
    BertTokenizerFast(vocab={"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}).save_pretrained(run / "model")
    (run / "results.json").write_text(json.dumps(RUN_RESULTS))
    return run


def http_error(status: int):
    from huggingface_hub.errors import HfHubHTTPError

    httpx = hub_http_client()

    request = httpx.Request("POST", "https://hub.invalid/api/repos/create")
    return HfHubHTTPError(f"{status} Client Error", response=httpx.Response(status, request=request))


def hub_failures():
    from huggingface_hub.errors import HFValidationError, LocalTokenNotFoundError, OfflineModeIsEnabled

    httpx = hub_http_client()

    return {
        "offline": (
            OfflineModeIsEnabled("Cannot reach https://hub.invalid: offline mode is enabled."),
            "HF_HUB_OFFLINE",
        ),
        "no token": (LocalTokenNotFoundError("Token is required"), "hf auth login"),
        "token refused": (http_error(401), "hf auth login"),
        "no write access": (http_error(403), "may not write to 'someone/run'"),
        "no such repo": (http_error(404), "check the repo id"),
        "bad repo id": (HFValidationError("Repo id must be in the form 'repo_name'"), "not a valid repo id"),
        "no network": (httpx.ConnectError("[Errno -2] Name or service not known"), "check the network connection"),
    }


@pytest.mark.parametrize(
    "case", ["offline", "no token", "token refused", "no write access", "no such repo", "bad repo id", "no network"]
)
@pytest.mark.parametrize("step", ["create_repo", "upload_folder"])
def test_every_hub_failure_ends_in_one_line_that_says_what_to_do(
    tiny_backbone, tmp_path, monkeypatch, capsys, case, step
):
    error, advice = hub_failures()[case]
    run = finished_run(tiny_backbone, tmp_path)
    api = RecordingApi()

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(api, step, fail)
    monkeypatch.setattr("dwatt.hub.HfApi", lambda *a, **k: api)
    assert main(["push", str(run), "someone/run", "--backbone-id", "someone/tiny-bert"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dwatt push: error: ") and advice in err, err


def test_push_with_the_hub_switched_off_ends_in_one_line(tiny_backbone, tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    run = finished_run(tiny_backbone, tmp_path)
    assert main(["push", str(run), "someone/run", "--backbone-id", "someone/tiny-bert"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HF_HUB_OFFLINE" in err and "Traceback" not in err
