"""Helpers several test files share (test files import these, never each other)."""

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file

from dwatt.execution import Execution, ExecutionOf
from dwatt.training import EXECUTION, RunConfig

WORKER = Path(__file__).with_name("distributed_worker.py")
# Folders that each hold one transformers release and its dependencies (torch comes from this environment), separated
# by the path separator; the releases the docs' range names (docs/guides/hub.md). CI installs them.
RELEASES = [folder for folder in os.environ.get("DWATT_TRANSFORMERS_RELEASES", "").split(os.pathsep) if folder]


def stopped_while_scoring_test(monkeypatch, command) -> None:
    """`command()` (a probe or sweep with --test) stopped as Ctrl-C would stop it while the test split is scored,
    after every head of its group trained and was kept."""
    import pytest

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr("dwatt.training.ner.scored_test_split", stopped)
        with pytest.raises(KeyboardInterrupt):
            command()


def executing(alone=None, together=None) -> Execution:
    """How a test's sweep or probe trains: `dwatt.training.EXECUTION`, a fake in place of either way where given (a
    fake `together` is handed the configs only)."""
    return ExecutionOf(
        alone=alone or EXECUTION.alone,
        together=EXECUTION.together if together is None else lambda configs, **_: together(configs),
    )


def recording_runner(calls: list):
    """A stand-in for a sweep's run: records the config and returns it the way a run's results do."""

    def runner(config: RunConfig) -> dict:
        calls.append(config)
        return {"config": asdict(config), "best_dev_f1": 0.5, "engine": "trainer"}

    return runner


def trained_like(model):
    """Perturb every trainable non-backbone weight, so that a reload that silently re-initialised one would show."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.requires_grad and not name.startswith("dwatt.backbone."):
                parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval()


def padded_batch(rows: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    """Random ids in 5..98 with padding in the first row's second half."""
    torch.manual_seed(seed)
    ids = torch.randint(5, 99, (rows, length))
    mask = torch.ones_like(ids)
    mask[0, length // 2 :] = 0  # padding in the first row
    return {"input_ids": ids, "attention_mask": mask}


def with_random_head(model):
    """Random non-zero heads (seeded), so that wrong positions or padding would show in the outputs."""
    torch.manual_seed(5)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if not name.startswith("dwatt.backbone."):
                parameter.add_(torch.randn_like(parameter) * 0.3)
    return model.eval()


ENSEMBLE_LABELS = {0: "O", 1: "B-PER", 2: "I-PER"}


def saved_with_tokenizer(model, folder, backbone):
    """`model` with random heads (`with_random_head`), saved into `folder` with `backbone`'s tokenizer."""
    from transformers import AutoTokenizer

    with_random_head(model).save_pretrained(folder)
    AutoTokenizer.from_pretrained(backbone).save_pretrained(folder)
    return folder


def an_ensemble(task, backbone, folder, layers=(2, 1)):
    """A probe ensemble's folder (as `dwatt probe --save-ensemble` writes it) of heads on `layers` of `backbone`
    (random, seeded heads; labels `ENSEMBLE_LABELS`): the deepest member whole, the others head-only."""
    from dwatt import DWAttForSequenceClassification, DWAttForTokenClassification
    from dwatt.checkpoints import write_ensemble
    from dwatt.experiment.probe_models import store_member

    build = DWAttForTokenClassification if task == "ner" else DWAttForSequenceClassification
    torch.manual_seed(0)
    for layer in layers:
        member = build.from_backbone(str(backbone), fusion="base", fused_layers=str(layer), id2label=ENSEMBLE_LABELS)
        saved_with_tokenizer(member, folder / f"layer-{layer}" / "model", backbone)
        store_member(folder / f"layer-{layer}" / "model", whole=layer == max(layers))
    write_ensemble(folder, [f"layer-{layer}/model" for layer in layers], {"task": task, "k": len(layers)})
    return folder


class RecordingApi:
    """Stands in for huggingface_hub.HfApi at its API boundary and records what the upload would send."""

    def __init__(self, *args, **kwargs):
        self.calls = []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))
        return type("RepoUrl", (), {"repo_id": repo_id})()

    def upload_folder(self, *, repo_id, folder_path, commit_message, **kwargs):
        folder = Path(folder_path)
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
        self.calls.append(("upload_folder", repo_id, {"files": files, "commit_message": commit_message, **kwargs}))
        return type("CommitInfo", (), {"commit_url": f"https://hub.invalid/{repo_id}/commit/1"})()


def launch(config: RunConfig, tmp_path: Path, processes: int = 2, caches_on_disk: bool = False) -> list[dict]:
    """Run `config` under torchrun; return each process's record (files written, results, final weights).
    `caches_on_disk`: every feature cache is memory-mapped from disk, however small."""
    record = tmp_path / "record"
    record.mkdir()
    (tmp_path / "config.json").write_text(json.dumps(asdict(config)))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(processes),
            str(WORKER),
            str(tmp_path / "config.json"),
            str(record),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, **({"DWATT_TEST_CACHES_ON_DISK": "1"} if caches_on_disk else {})),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    records = []
    for rank in range(processes):
        records.append(json.loads((record / f"rank{rank}.json").read_text()))
        records[-1]["weights"] = load_file(str(record / f"rank{rank}.safetensors"))
    return records


def config_for(tiny_backbone, tiny_conll, output_dir: Path, **kwargs) -> RunConfig:
    # 2 x 4 entity types = 8 sentences and a global batch of 8: one optimizer step per epoch, so the order of the
    # sentences within an epoch cannot matter; no dropout in the head (the backbone is frozen, in eval mode).
    defaults = dict(
        backbone=str(tiny_backbone),
        data_dir=str(tiny_conll),
        n_shot=2,
        epochs=3,
        batch_size=8,
        learning_rate=5e-3,
        output_dir=str(output_dir),
        progress=False,
        cache_dtype="float32",
        evaluate_test=True,
        extra={"classifier_dropout": 0.0},
    )
    return RunConfig(**(defaults | kwargs))


# Results rows of the kind a sweep writes, for the report's and the selection's tests.
def ner_row(fusion, n, epochs, trial, f1, dataset="conll2003", mode="fe", backbone="/m/small", pool=14041):
    layers = [1, 2, 3]
    weights = {
        "layers": layers,
        "by_type": {"PER": [0.2, 0.3, 0.5], "O": [0.6, 0.3, 0.1]},
        "positions": {"PER": 3, "O": 9},
    }
    return {
        "task": "ner",
        "config": {
            "backbone": backbone,
            "fusion": fusion,
            "mode": mode,
            "dataset": dataset,
            "n_shot": n,
            "epochs": epochs,
        },
        "seed": trial,
        "best_dev_f1": f1,
        "final_dev_f1": f1,
        "best_epoch": epochs,
        "train_pool_size": pool,
        "dev_curve": [{"epoch": e, "step": 2 * e, "f1": f1 * e / epochs} for e in range(1, epochs + 1)],
        **({"dev_layer_weights": weights} if fusion == "dwatt" else {}),
    }


def fair_row(fusion, trial, rate, dev, test, layer=None, n=32):
    row = ner_row(fusion, n, 25, trial, dev, backbone="/m/deep")
    row["config"] |= {"learning_rate": rate, "layers": str(layer) if layer is not None else "all"}
    row["test_scores"] = {"f1": test}
    row["backbone_layers"] = 3
    row["num_dev_sentences"] = 200
    row.pop("dev_layer_weights", None)
    return row


def window_grid_rows():
    """A probe of 8 layers that chooses layer 6 on dev and layer 3 on each trial's few-shot dev sample, and ScalarMix
    on the windows around both, with the last layer (4-8: test 0.7; 1-5: test 0.6) and alone (only:4-8: 0.75;
    only:1-5: 0.65), at two rates, the better rate on dev 1e-3 (test 0.05 higher)."""
    rows = []
    for trial in range(2):
        for layer in range(1, 9):
            for rate in (1e-4, 1e-3):
                row = fair_row("base", trial, rate, 0.5 + 0.1 * (layer == 6) - 0.05 * (rate == 1e-4), 0.5, layer)
                row["few_shot_dev"] = {
                    "sentences": 128,
                    "best_f1": 0.4 + 0.1 * (layer == 3) - 0.05 * (rate == 1e-4),
                    "best_epoch": 3.0,
                    "test_scores": {"f1": 0.5},
                }
                rows.append(row)
        for window, test in (("4-8", 0.7), ("1-5", 0.6), ("only:4-8", 0.75), ("only:1-5", 0.65)):
            for rate in (1e-4, 1e-3):
                row = fair_row("scalar_mix", trial, rate, 0.5 + 0.1 * (rate == 1e-3), test + 0.05 * (rate == 1e-3))
                row["config"]["layers"] = window
                row["few_shot_dev"] = {
                    "sentences": 128,
                    "best_f1": 0.5 + 0.1 * (rate == 1e-3),
                    "best_epoch": 3.0,
                    "test_scores": {"f1": test},
                }
                rows.append(row)
    for row in rows:
        row["backbone_layers"] = 8
    return rows


def fresh_copy(folder, tmp_path):
    import shutil

    return Path(shutil.copytree(folder, tmp_path / "copy"))


def files_of(folder) -> dict:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


T_975_2_DOF = 4.302652729911275  # Student's t quantile, 0.975, 2 degrees of freedom (from tables)


def mlm_row(fusion, ppl):
    return {
        "task": "mlm",
        "config": {"backbone": "/m/small", "fusion": fusion, "mode": "ft", "epochs": 1, "task": "mlm"},
        "seed": 0,
        "best_dev_perplexity": ppl + 1,
        "test_perplexity": ppl,
    }


def tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path, **kwargs):
    """A quick NER run on the tiny backbone and CoNLL sample: 2-shot, 3 epochs, fp32 cache."""
    defaults = dict(
        backbone=str(tiny_backbone),
        data_dir=str(tiny_conll),
        n_shot=2,
        epochs=3,
        batch_size=4,
        learning_rate=5e-3,
        output_dir=str(tmp_path),
        progress=False,
        cache_dtype="float32",
    )
    return RunConfig(**(defaults | kwargs))


SENTENCES = [
    ["peter", "blackburn"],
    ["eu", "rejects", "german", "call", "to", "boycott", "british", "lamb"],
    ["brussels"],
    (["eu", "rejects", "german", "call", "to", "boycott", "british", "lamb", "peter", "blackburn"] * 4)[
        :37
    ],  # windows
    ["lamb", "to", "brussels", "peter"],
]


def write(path: Path, text: str) -> Path:
    """`text` written to `path` in UTF-8; the path."""
    path.write_text(text, encoding="utf-8")
    return path


# What `dwatt train` writes to results.json, cut to what a model card and a push read.
RUN_RESULTS = {
    "config": {"dataset": "conll2003", "mode": "fe", "n_shot": 16, "epochs": 25, "fusion": "dwatt"},
    "best_dev_f1": 0.30076,
    "best_epoch": 24.0,
    "best_dev_scores": {"precision": 0.25, "recall": 0.375, "f1": 0.30076, "accuracy": 0.86},
    "num_train_sentences": 64,
    "seed": 0,
}


def every_experiment() -> list[dict]:
    """Rows of every experiment the report tables and draws: the paper grid (FE, FT, a large backbone), WikiAnn, AG
    News, a depth grid and masked LM."""
    rows = []
    for trial in range(3):
        for fusion, gain in (("base", 0.0), ("base_plus_n", 0.1), ("concat", 0.2), ("dwatt", 0.3)):
            for n in (8, 128):
                for epochs in (2, 4):
                    rows.append(ner_row(fusion, n, epochs, trial, 0.1 + gain + 0.01 * trial + n / 1000))
                rows.append(ner_row(fusion, n, 4, trial, 0.5 + gain, mode="ft"))
                rows.append(ner_row(fusion, n, 4, trial, 0.2 + gain, backbone="/m/large"))
            for language, pool in (("en", 20000), ("af", 5000), ("sw", 1000), ("yo", 100)):
                rows.append(
                    ner_row(fusion, 100, 25, trial, gain + pool / 1e5, dataset=f"wikiann:{language}", pool=pool)
                )
    rows += [
        cls_row(f, n, trial, 0.6 + gain + n / 1000)
        for trial in range(3)
        for f, gain in (("base", 0.0), ("dwatt", 0.1))
        for n in (4, 16)
    ]
    rows += [
        ner_row(f, n, 25, trial, 0.3 + gain, backbone="/m/deep") | {"num_dev_sentences": 1000}  # the depth grid
        for trial in range(2)
        for f, gain in (("base", 0.0), ("dwatt", 0.2))
        for n in (8, 32)
    ]
    return rows + [mlm_row(f, p) for f, p in (("base", 3.0), ("dwatt", 2.5), ("concat", 4.0), ("base_plus_n", 3.5))]


def cls_row(fusion, n, trial, accuracy):
    return {
        "task": "cls",
        "seed": trial,
        "pooling": "mean",
        "best_dev_accuracy": accuracy,
        "best_dev_macro_f1": accuracy - 0.01,
        "best_epoch": 5,
        "config": {
            "backbone": "/m/small",
            "fusion": fusion,
            "mode": "fe",
            "dataset": "ag_news",
            "n_shot": n,
            "epochs": 5,
            "task": "cls",
            "seed": trial,
        },
    }


def counting_backbone_runs(model, monkeypatch, stop_after: int | None = None) -> list:
    """Count the backbone runs of `model`'s feature cache builds; with `stop_after`, the run after that many stops
    the build as Ctrl-C would."""
    runs, run_backbone = [], model.dwatt.run_backbone

    def counted(**inputs):
        if stop_after is not None and len(runs) == stop_after:
            raise KeyboardInterrupt
        runs.append(inputs["input_ids"].shape[0])
        return run_backbone(**inputs)

    monkeypatch.setattr(model.dwatt, "run_backbone", counted)
    return runs


def engine_config(tiny_backbone, tiny_conll, folder, **kwargs):
    """A run for the stacked engine's tests: `tiny_ner_run_config` in batches of 3, nothing saved."""
    return tiny_ner_run_config(tiny_backbone, tiny_conll, folder, **({"batch_size": 3, "save_model": False} | kwargs))


def head_weights(folder) -> dict:
    """A saved run's head weights (everything but the backbone)."""
    from safetensors.torch import load_file

    return {k: v for k, v in load_file(str(folder / "model" / "model.safetensors")).items() if "backbone" not in k}


def with_rotary_base(backbone: Path, folder: Path, base: float = 1e5) -> Path:
    """A copy of the decoder `backbone` whose rotary base is `base`, not the default 1e4 (SmolLM2's is 1e5, Qwen2.5's
    1e6): a release that misreads the base runs another model."""
    import json
    import shutil

    shutil.copytree(backbone, folder)
    config = json.loads((folder / "config.json").read_text())
    config["rope_parameters"] = {**config["rope_parameters"], "rope_theta": base}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# Per readout, each trial's test F1 of the head dev chooses (layer 2 at 1e-3), given as offsets from first's.
OFFSETS = {
    "first": (0, 0, 0),
    "last": (0.051, 0.049, 0.050),
    "mean": (0.001, -0.001, 0.0005),
    "echo-mean": (0.2, -0.1, 0.0),
}


def readout_rows():
    """Probe rows of four readouts, three trials, three layers and two rates: the dev choice is layer 2 at 1e-3, whose
    test F1 is the first sub-token's plus `OFFSETS`' (last five points ahead, mean a tenth within, echo-mean spread)."""
    made = []
    for readout, offsets in OFFSETS.items():
        for trial, offset in enumerate(offsets):
            base_test = 0.5 + 0.01 * trial
            for layer in (1, 2, 3):
                for rate in (1e-4, 1e-3):
                    chosen = layer == 2 and rate == 1e-3
                    row = fair_row(
                        "base", trial, rate, 0.6 if chosen else 0.4, base_test + offset if chosen else 0.1, layer
                    )
                    row["config"]["word_readout"] = readout
                    made.append(row)
    return made
