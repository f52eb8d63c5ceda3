"""Checkpoints saved by today's code load with equal logits in the transformers releases users have, through
`trust_remote_code` in a process without dwatt: the supported range's oldest (4.46, 4.53; the last 4.x, 4.57), its
first 5.x (5.0) and its newest, each installed by CI in a folder of its own (`pip install --target`) named in
DWATT_TRANSFORMERS_RELEASES, and this environment's. Token and sequence classification and masked LM; full,
head-only, LoRA (merged and beside the head) and cut at a layer."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import RELEASES

FIXTURES = Path(__file__).parent / "fixtures"
LOAD = """
import json, sys
from pathlib import Path
import torch, transformers
from safetensors.torch import load_file
root, report = Path(sys.argv[1]), {"transformers": transformers.__version__, "differences": {}}
autos = {"TokenClassification": "AutoModelForTokenClassification", "SequenceClassification":
         "AutoModelForSequenceClassification", "MaskedLM": "AutoModelForMaskedLM"}
for folder in sorted(path for path in root.iterdir() if (path / "expected.safetensors").is_file()):
    architecture = json.loads((folder / "config.json").read_text())["architectures"][0]
    auto = getattr(transformers, next(name for suffix, name in autos.items() if architecture.endswith(suffix)))
    try:
        model = auto.from_pretrained(str(folder), trust_remote_code=True, backbone_name_or_path=str(root / "backbone")).eval()
    except Exception as error:
        report["differences"][folder.name] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        continue
    expected = load_file(str(folder / "expected.safetensors"))
    with torch.no_grad():
        logits = model(input_ids=expected["input_ids"], attention_mask=expected["attention_mask"]).logits
    mask = expected["attention_mask"].bool()
    got, want = (logits[mask] if logits.dim() == 3 else logits), (expected["logits"][mask] if logits.dim() == 3 else expected["logits"])
    report["differences"][folder.name] = float((got - want).abs().max())
print(json.dumps(report))
"""


def saved_today(folder: Path) -> list[str]:
    """The fixture's checkpoints (every task, full, head-only, LoRA, a head on layer 2), a head cut at layer 2 saved
    whole and a tagger whose backbone ran in bf16 (saved so, loaded in fp32), written by today's model files, each
    with the logits it computes as loaded."""
    spec = importlib.util.spec_from_file_location("make_checkpoints", FIXTURES / "make_old_checkpoints.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.CHECKPOINTS = [
        (name, architecture.removeprefix("Roberta"), *rest) for name, architecture, *rest in module.CHECKPOINTS
    ]
    module.CHECKPOINTS.append(
        (
            "base-layer2-tagger-cut-full",
            "DWAttForTokenClassification",
            "base",
            False,
            False,
            {"num_labels": 5, "fused_layers": "2"},
        )
    )
    module.CHECKPOINTS.append(
        (
            "dwatt-tagger-bf16-backbone-full",
            "DWAttForTokenClassification",
            "dwatt",
            False,
            False,
            {"num_labels": 5, "backbone_dtype": "bfloat16"},
        )
    )
    module.main(folder)
    return [name for name, *_ in module.CHECKPOINTS]


def report_without_dwatt(script: str, root: Path, tmp_path: Path, release: str | None = None) -> dict:
    """The report `script` (`LOAD`, `ENCODE`) prints last of the folder `root`, run in a process without dwatt (the
    release's transformers first on its path, where given)."""
    from .conftest import BLOCKED_IMPORTS

    path = tmp_path / "without_dwatt.py"
    path.write_text(BLOCKED_IMPORTS + script)
    environment = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(path), str(root)],
        cwd=tmp_path,
        env=environment | {"PYTHONNOUSERSITE": "1"} | ({"PYTHONPATH": release} if release else {}),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def load_in_a_process_without_dwatt(tmp_path: Path, release: str | None = None) -> tuple[list[str], dict]:
    """Today's checkpoints, and what a process without dwatt (the release's transformers first on its path, where
    given) reports of loading them: `{"transformers": version, "differences": {name: max |logit difference|}}`."""
    names = saved_today(tmp_path / "checkpoints")
    return names, report_without_dwatt(LOAD, tmp_path / "checkpoints", tmp_path, release)


@pytest.mark.skipif(
    not RELEASES, reason="DWATT_TRANSFORMERS_RELEASES names no folder of a transformers release (CI sets it)"
)
@pytest.mark.parametrize("release", RELEASES or [None], ids=lambda folder: Path(folder or "none").name)
def test_checkpoints_saved_today_load_with_equal_logits_under_each_supported_transformers_release(tmp_path, release):
    """Every checkpoint, but ScalarMix's before 4.49: those releases rename any weight named `gamma` as they load it
    (ScalarMix's scale), and the load is refused in one line that names the release that reads it."""
    names, report = load_in_a_process_without_dwatt(tmp_path, release)
    assert Path(release).name.endswith(report["transformers"]), report  # the folder's release, not this environment's
    assert set(report["differences"]) == set(names)
    renames = tuple(int(part) for part in report["transformers"].split(".")[:2]) < (4, 49)
    refused = {name: text for name, text in report["differences"].items() if isinstance(text, str)}
    if renames:
        assert {name for name in names if name.startswith("scalar_mix")} == set(refused), report
        assert all("\n" not in text and "transformers >= 4.49" in text for text in refused.values()), refused
    assert all(name in refused or difference <= 1e-4 for name, difference in report["differences"].items()), report


@pytest.mark.skipif(
    not RELEASES, reason="DWATT_TRANSFORMERS_RELEASES names no folder of a transformers release (CI sets it)"
)
@pytest.mark.parametrize("release", RELEASES or [None], ids=lambda folder: Path(folder or "none").name)
def test_a_decoder_checkpoint_with_its_own_rotary_base_loads_with_equal_logits_under_each_release(
    tiny_decoder, tmp_path, release
):
    """A tagger and a text classifier on a Llama whose rotary base is not the default, saved today (transformers 5
    writes the base in `rope_parameters` alone, which 4.x does not read: it ran the default base, another model),
    load through remote code in a process without dwatt with the logits they compute as saved."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    from dwatt import DWAttForSequenceClassification, DWAttForTokenClassification

    from .helpers import with_random_head, with_rotary_base

    backbone = with_rotary_base(tiny_decoder, tmp_path / "backbone")
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    tokenizer.pad_token = tokenizer.eos_token
    batch = tokenizer(["the cat sat on the mat today", "a dog"], padding=True, return_tensors="pt")
    for name, model_class in (("tagger", DWAttForTokenClassification), ("classifier", DWAttForSequenceClassification)):
        torch.manual_seed(0)
        model = with_random_head(model_class.from_backbone(str(backbone), fusion="dwatt", num_labels=3))
        model.save_pretrained(tmp_path / "checkpoints" / name)
        with torch.no_grad():
            logits = model(**batch).logits
        save_file({"logits": logits, **batch}, str(tmp_path / "checkpoints" / name / "expected.safetensors"))
    (tmp_path / "checkpoints" / "backbone").mkdir()  # LOAD names it for head-only checkpoints; these are whole
    report = report_without_dwatt(LOAD, tmp_path / "checkpoints", tmp_path, release)
    assert Path(release).name.endswith(report["transformers"]), report
    assert set(report["differences"]) == {"tagger", "classifier"}, report
    assert all(isinstance(d, float) and d <= 1e-4 for d in report["differences"].values()), report


def test_checkpoints_saved_today_load_with_equal_logits_under_this_transformers(tmp_path):
    """The same script under this environment's transformers, in a process without dwatt."""
    names, report = load_in_a_process_without_dwatt(tmp_path)
    assert set(report["differences"]) == set(names)
    assert all(
        isinstance(difference, float) and difference <= 1e-4 for difference in report["differences"].values()
    ), report


ENCODE = """
import json, sys
from pathlib import Path
import transformers
from transformers import AutoTokenizer
root = Path(sys.argv[1])
expected = json.loads((root / "expected.json").read_text())
report = {"transformers": transformers.__version__, "differences": {}}
for family, ids in expected["ids"].items():
    try:
        got = AutoTokenizer.from_pretrained(str(root / family))(expected["texts"])["input_ids"]
    except Exception as error:
        report["differences"][family] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        continue
    report["differences"][family] = [i for i, (a, b) in enumerate(zip(got, ids)) if a != b]
print(json.dumps(report))
"""


@pytest.mark.skipif(
    not RELEASES, reason="DWATT_TRANSFORMERS_RELEASES names no folder of a transformers release (CI sets it)"
)
@pytest.mark.parametrize("release", RELEASES or [None], ids=lambda folder: Path(folder or "none").name)
def test_saved_tokenizers_encode_real_text_to_the_ids_training_used_under_each_supported_release(tmp_path, release):
    """Each family's tokenizer, read by dwatt and saved as its checkpoints save it, then loaded by `AutoTokenizer` in
    a process without dwatt under the release: 40 CoNLL-03 sentences as running text (what a pipeline gives it) become
    the ids dwatt's tokenizer gave them. Saved plainly, Gemma's loses its <eos> in 4.x (the check's own control)."""
    from dwatt.tokenization import load_tokenizer, save_tokenizer

    from .tokenizer_families import FAMILIES, conll_sentences, write_family_tokenizer

    texts = [" ".join(words) for words in conll_sentences(count=40)]
    expected = {"texts": texts, "ids": {}}
    for family in FAMILIES:
        trained = load_tokenizer(write_family_tokenizer(family, tmp_path / "hub" / family))
        save_tokenizer(trained, tmp_path / "saved" / family)
        trained.save_pretrained(tmp_path / "saved" / f"{family}-saved-plainly")
        expected["ids"][family] = expected["ids"][f"{family}-saved-plainly"] = trained(texts)["input_ids"]
    (tmp_path / "saved" / "expected.json").write_text(json.dumps(expected))
    report = report_without_dwatt(ENCODE, tmp_path / "saved", tmp_path, release)
    assert Path(release).name.endswith(report["transformers"]), report
    assert {family: report["differences"][family] for family in FAMILIES} == dict.fromkeys(FAMILIES, []), report
    plain_gemma = report["differences"]["gemma-saved-plainly"]
    assert plain_gemma == ([] if report["transformers"].startswith("5.") else list(range(len(texts)))), report


PIPELINE = """
import json, sys
from pathlib import Path
import transformers
from transformers import pipeline
root, report = Path(sys.argv[1]), {"transformers": transformers.__version__, "answers": {}}
for task in ("token-classification", "text-classification"):
    try:
        answer = pipeline(task, model=str(root / task), trust_remote_code=True)("peter visited brussels")
        report["answers"][task] = [item.get("entity", item.get("label")) for item in answer]
    except Exception as error:
        report["answers"][task] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
print(json.dumps(report))
"""


@pytest.mark.skipif(
    not RELEASES, reason="DWATT_TRANSFORMERS_RELEASES names no folder of a transformers release (CI sets it)"
)
@pytest.mark.parametrize("release", RELEASES or [None], ids=lambda folder: Path(folder or "none").name)
def test_a_checkpoint_with_remote_code_runs_in_pipeline_under_each_release(tiny_backbone, tmp_path, release):
    """`pipeline(task, model=folder, trust_remote_code=True)` in a process without dwatt: 4.x loads a tokenizer only
    for a config that names its class (dwatt's config type is unknown to it), so a checkpoint saved as dwatt saves it
    names one (it ran with no tokenizer: "'NoneType' object is not callable"); its answers are the checkpoint's."""
    import torch

    from dwatt import DWAttForSequenceClassification, DWAttForTokenClassification
    from dwatt.data import CONLL_LABELS
    from dwatt.tokenization import load_tokenizer, save_tokenizer

    tokenizer = load_tokenizer(tiny_backbone)
    labels = {"token-classification": dict(enumerate(CONLL_LABELS)), "text-classification": {0: "a", 1: "b"}}
    expected = {}
    for task, model_class in (
        ("token-classification", DWAttForTokenClassification),
        ("text-classification", DWAttForSequenceClassification),
    ):
        torch.manual_seed(0)
        model = model_class.from_backbone(str(tiny_backbone), fusion="concat", id2label=labels[task]).eval()
        model.save_pretrained(tmp_path / "checkpoints" / task)
        save_tokenizer(tokenizer, tmp_path / "checkpoints" / task)
        from transformers import pipeline

        answer = pipeline(task, model=model, tokenizer=tokenizer)("peter visited brussels")
        expected[task] = [item.get("entity", item.get("label")) for item in answer]
    report = report_without_dwatt(PIPELINE, tmp_path / "checkpoints", tmp_path, release)
    assert Path(release).name.endswith(report["transformers"]), report
    assert report["answers"] == expected, report
