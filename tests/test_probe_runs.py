"""How the probe's heads train (dwatt.experiment.probe_runs): through the sweep into the probe's store, stacked, with
the settings every run shares, their rows read back by run id."""

from dwatt.experiment import probe_runs, store
from dwatt.experiment.probe_types import ProbeSettings

from .helpers import executing


def test_the_probe_trains_its_runs_through_the_sweep_stacked_into_its_store(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(probe_runs, "run_sweep", lambda specs, *args, **kwargs: calls.append((specs, args, kwargs)))
    monkeypatch.setattr(
        store.ResultsStore,
        "finished",
        lambda self, specs, overrides, engine: {"run": {"path": str(self.path), "engine": engine, **overrides}},
    )
    settings = ProbeSettings(results=str(tmp_path / "probe.jsonl"), output_root=str(tmp_path / "runs"), test=True)
    rows = probe_runs.trained_runs(settings, ["spec"], executing(), train_in_parts=4)
    ((specs, args, kwargs),) = calls
    assert specs == ["spec"] and args == (settings.store, settings.output_root)
    assert kwargs["engine"] == "stacked" and kwargs["train_in_parts"] == 4 and kwargs["evaluate_test"] is True
    assert rows == {"run": {"path": str(settings.store), "engine": "stacked", **settings.overrides()}}
