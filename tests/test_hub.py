"""Head-only checkpoints, model cards, push_to_hub (at the HfApi boundary) and pull from a Hub cache, all offline; a
probe ensemble pushed as one repo and run by its id. The command `dwatt push`: test_cli_push."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from dwatt import FUSIONS, RobertaDWAttForMaskedLM, RobertaDWAttForTokenClassification
from dwatt.checkpoints import load_checkpoint
from dwatt.hub import push_run, push_to_hub
from dwatt.model_cards import model_card

from .conftest import run_without_dwatt, save_tiny_backbone
from .helpers import RUN_RESULTS, RecordingApi, an_ensemble, trained_like

TASKS = {"token": RobertaDWAttForTokenClassification, "mlm": RobertaDWAttForMaskedLM}
AUTO = {"token": "AutoModelForTokenClassification", "mlm": "AutoModelForMaskedLM"}


@pytest.fixture(scope="module")
def backbone(tmp_path_factory) -> Path:
    return save_tiny_backbone(tmp_path_factory.mktemp("tiny-bert"), "bert")


def inputs():
    torch.manual_seed(5)
    ids = torch.randint(5, 99, (2, 6))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    return ids, mask


def stored_keys(folder: Path) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        return set(handle.keys())


def test_head_only_round_trip_every_fusion_and_task_in_a_process_without_dwatt(backbone, tmp_path):
    ids, mask = inputs()
    torch.save({"ids": ids, "mask": mask}, tmp_path / "inputs.pt")
    cases = {}
    for task, cls in TASKS.items():
        for fusion in FUSIONS:
            model = trained_like(cls.from_backbone(str(backbone), fusion=fusion, num_labels=5))
            folder = tmp_path / f"{task}-{fusion}"
            model.save_pretrained(folder, heads_only=True)
            keys = stored_keys(folder)
            assert keys and not any(k.startswith("dwatt.backbone.") for k in keys)
            assert keys == set(model.head_state_dict())
            assert json.loads((folder / "config.json").read_text())["heads_only"] is True
            assert model.config.heads_only is False  # the in-memory model is still complete
            with torch.no_grad():
                cases[str(folder)] = (task, model(input_ids=ids, attention_mask=mask).logits)
    script = f"""
        import json, torch, transformers
        inputs = torch.load({str(tmp_path / "inputs.pt")!r})
        results = {{}}
        for folder, auto in json.loads({json.dumps({f: AUTO[t] for f, (t, _) in cases.items()})!r}).items():
            model = getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True).eval()
            assert model.config.heads_only is False
            with torch.no_grad():
                results[folder] = model(input_ids=inputs["ids"], attention_mask=inputs["mask"]).logits
        torch.save(results, {str(tmp_path / "results.pt")!r})
    """
    run_without_dwatt(script, tmp_path)
    results = torch.load(tmp_path / "results.pt")
    for folder, (_, expected) in cases.items():
        torch.testing.assert_close(results[folder], expected, atol=1e-6, rtol=0)


def test_frozen_lm_head_is_left_out_and_comes_back_from_the_backbone(backbone, tmp_path):
    model = RobertaDWAttForMaskedLM.from_backbone(str(backbone), fusion="concat")
    model.lm_head.requires_grad_(False)
    model = trained_like(model)
    model.save_pretrained(tmp_path, heads_only=True)
    assert not any(k.startswith("lm_head.") for k in stored_keys(tmp_path))
    reloaded = RobertaDWAttForMaskedLM.from_pretrained(tmp_path).eval()
    ids, mask = inputs()
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=ids, attention_mask=mask).logits, model(input_ids=ids, attention_mask=mask).logits
        )


def test_head_only_checkpoint_is_a_small_part_of_the_full_one(backbone, tmp_path):
    model = RobertaDWAttForTokenClassification.from_backbone(str(backbone), fusion="dwatt", num_labels=5)
    model.save_pretrained(tmp_path / "full")
    model.save_pretrained(tmp_path / "head", heads_only=True)
    full, head = (
        (tmp_path / "full/model.safetensors").stat().st_size,
        (tmp_path / "head/model.safetensors").stat().st_size,
    )
    assert head < full
    assert stored_keys(tmp_path / "head") < stored_keys(tmp_path / "full")


def test_backbone_can_be_moved_and_named_at_load_time(backbone, tmp_path):
    moved = Path(shutil.copytree(backbone, tmp_path / "moved-backbone"))
    model = trained_like(RobertaDWAttForTokenClassification.from_backbone(str(moved), num_labels=5))
    model.save_pretrained(tmp_path / "head", heads_only=True)
    shutil.move(moved, tmp_path / "elsewhere")
    with pytest.raises(OSError):
        RobertaDWAttForTokenClassification.from_pretrained(tmp_path / "head")
    reloaded = RobertaDWAttForTokenClassification.from_pretrained(
        tmp_path / "head", backbone_name_or_path=str(tmp_path / "elsewhere")
    )
    assert reloaded.config.backbone_name_or_path == str(tmp_path / "elsewhere")
    ids, mask = inputs()
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded.eval()(input_ids=ids, attention_mask=mask).logits,
            model(input_ids=ids, attention_mask=mask).logits,
        )


def test_a_backbone_of_another_architecture_is_refused(backbone, tmp_path):
    RobertaDWAttForTokenClassification.from_backbone(str(backbone), num_labels=5).save_pretrained(
        tmp_path / "head", heads_only=True
    )
    wider = save_tiny_backbone(tmp_path / "wider", "bert", hidden_size=48, intermediate_size=40)
    with pytest.raises(
        ValueError,
        match=r"not the one this model was built for: hidden_size 48 instead of 32; intermediate_size 40 instead of 37",
    ):
        RobertaDWAttForTokenClassification.from_pretrained(tmp_path / "head", backbone_name_or_path=str(wider))
    other = save_tiny_backbone(tmp_path / "mpnet", "mpnet")
    with pytest.raises(ValueError, match=r"model_type 'mpnet' instead of 'bert'"):
        RobertaDWAttForTokenClassification.from_pretrained(tmp_path / "head", backbone_name_or_path=str(other))


def test_corrupted_truncated_or_missing_weights_are_refused(backbone, tmp_path):
    model = RobertaDWAttForTokenClassification.from_backbone(str(backbone), num_labels=5)
    for name in ("truncated", "garbage", "missing", "head-without-classifier"):
        model.save_pretrained(tmp_path / name, heads_only=True)
    weights = tmp_path / "truncated/model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    (tmp_path / "garbage/model.safetensors").write_bytes(b"\x00" * 64)
    (tmp_path / "missing/model.safetensors").unlink()
    for name in ("truncated", "garbage"):
        with pytest.raises(ValueError, match="corrupted or truncated"):
            RobertaDWAttForTokenClassification.from_pretrained(tmp_path / name)
    with pytest.raises(OSError, match="model.safetensors|pytorch_model.bin"):
        RobertaDWAttForTokenClassification.from_pretrained(tmp_path / "missing")
    from safetensors.torch import save_file

    partial = {k: v.contiguous() for k, v in model.head_state_dict().items() if not k.startswith("classifier.")}
    save_file(partial, str(tmp_path / "head-without-classifier/model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"lacks 2 weights the model needs: classifier\.bias, classifier\.weight"):
        RobertaDWAttForTokenClassification.from_pretrained(tmp_path / "head-without-classifier")


def test_heads_only_needs_to_know_the_backbone(tmp_path):
    from .conftest import tiny_config

    with pytest.raises(ValueError, match="needs `config.backbone_name_or_path`"):
        RobertaDWAttForTokenClassification(tiny_config()).save_pretrained(tmp_path, heads_only=True)


def test_a_head_only_save_writes_its_own_config_and_leaves_the_model_s_untouched(backbone, tmp_path):
    """The config written says how the tensors are stored (head only), as transformers' save wrote it otherwise (the
    class, the remote code's `auto_map`); the model's config object is never changed, not even during the save. A
    save that would push the folder before that config is written is refused, nothing written."""
    model = RobertaDWAttForTokenClassification.from_backbone(str(backbone), fusion="base", num_labels=3)
    seen = []
    original = type(model.config).to_json_string

    def recording(config, *args, **kwargs):
        seen.append((config is model.config, config.heads_only))
        return original(config, *args, **kwargs)

    type(model.config).to_json_string = recording
    try:
        model.save_pretrained(tmp_path / "head", heads_only=True)
    finally:
        type(model.config).to_json_string = original
    written = json.loads((tmp_path / "head" / "config.json").read_text())
    assert written["heads_only"] is True and written["architectures"] == ["DWAttForTokenClassification"]
    assert "AutoModelForTokenClassification" in written["auto_map"]
    assert (True, True) not in seen and model.config.heads_only is False
    from dwatt import DWAttModel

    with pytest.raises(ValueError, match="is a head-only checkpoint: load it with its task class"):
        DWAttModel.from_pretrained(tmp_path / "head")
    with pytest.raises(ValueError, match=r"push_to_hub=True\) of a head-only or LoRA checkpoint"):
        model.save_pretrained(tmp_path / "pushed", heads_only=True, push_to_hub=True, repo_id="someone/head")
    assert not (tmp_path / "pushed").exists()


def test_push_hands_huggingface_hub_exactly_the_head_only_files(backbone, tmp_path):
    model = RobertaDWAttForTokenClassification.from_backbone(str(backbone), num_labels=5)
    api = RecordingApi()
    url = push_to_hub(
        model,
        "someone/dwatt-ner",
        results=RUN_RESULTS,
        api=api,
        revision="main",
        private=True,
        backbone_id="someone/tiny-bert",
    )
    assert url.endswith("/commit/1")
    (create, repo_id, create_kwargs), (upload, upload_repo, upload_kwargs) = api.calls
    assert (create, repo_id, create_kwargs["exist_ok"], create_kwargs["private"]) == (
        "create_repo",
        "someone/dwatt-ner",
        True,
        True,
    )
    assert upload == "upload_folder" and upload_repo == "someone/dwatt-ner"
    assert (
        upload_kwargs["commit_message"] == "Upload head-only DWAtt checkpoint (dwatt)"
        and upload_kwargs["revision"] == "main"
    )
    files = upload_kwargs["files"]
    remote_code = {
        "modeling_dwatt.py",
        "configuration_dwatt.py",
        "backbones_dwatt.py",
        "depth_dwatt.py",
        "fusions_dwatt.py",
        "lora_dwatt.py",
        "pretrained_dwatt.py",
        "specs_dwatt.py",
        "base_model_dwatt.py",
    }
    assert set(files) == {"config.json", "model.safetensors", "README.md", "results.json"} | remote_code
    (tmp_path / "model.safetensors").write_bytes(files["model.safetensors"])
    assert not any(k.startswith("dwatt.backbone.") for k in stored_keys(tmp_path))
    assert json.loads(files["config.json"])["heads_only"] is True
    assert b"base_model: someone/tiny-bert" in files["README.md"]


def lay_out_snapshot(cache: Path, repo_id: str, commit: str, folder: Path, main: bool) -> None:
    """What `snapshot_download` leaves in the Hub cache: snapshots/<commit>/<files> and refs/main."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(folder, repo / "snapshots" / commit)
    if main:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(commit)


def test_pull_by_repo_id_from_the_hub_cache_offline_with_revision_pinning(backbone, tmp_path):
    ids, mask = inputs()
    torch.save({"ids": ids, "mask": mask}, tmp_path / "inputs.pt")
    cache = tmp_path / "hf" / "hub"
    first, second = "a" * 40, "b" * 40
    expected = {}
    for commit, is_main, seed in ((first, False, 1), (second, True, 2)):
        torch.manual_seed(seed)
        model = trained_like(RobertaDWAttForTokenClassification.from_backbone(str(backbone), num_labels=5))
        model.save_pretrained(tmp_path / commit, heads_only=True)
        lay_out_snapshot(cache, "someone/dwatt-ner", commit, tmp_path / commit, is_main)
        with torch.no_grad():
            expected[commit] = model(input_ids=ids, attention_mask=mask).logits
    script = f"""
        import torch
        from transformers import AutoModelForTokenClassification
        inputs = torch.load({str(tmp_path / "inputs.pt")!r})
        out = {{}}
        for name, revision in (("main", None), ("pinned", {first!r})):
            model = AutoModelForTokenClassification.from_pretrained("someone/dwatt-ner", revision=revision, trust_remote_code=True).eval()
            with torch.no_grad():
                out[name] = model(input_ids=inputs["ids"], attention_mask=inputs["mask"]).logits
        torch.save(out, {str(tmp_path / "pulled.pt")!r})
    """
    run_without_dwatt(script, tmp_path, HF_HUB_CACHE=str(cache))
    pulled = torch.load(tmp_path / "pulled.pt")
    torch.testing.assert_close(pulled["main"], expected[second], atol=1e-6, rtol=0)
    torch.testing.assert_close(pulled["pinned"], expected[first], atol=1e-6, rtol=0)


def uploaded(api: RecordingApi) -> dict[str, bytes]:
    return api.calls[-1][2]["files"]


def test_a_head_only_push_names_the_backbone_by_its_hub_id_never_by_a_local_path(backbone, tmp_path):
    model = RobertaDWAttForTokenClassification.from_backbone(str(backbone), num_labels=5)
    with pytest.raises(ValueError, match=r"head-only push needs the backbone's Hub id.*local path .*--backbone-id"):
        push_to_hub(model, "someone/head", api=RecordingApi())
    with pytest.raises(ValueError, match=r"--backbone-id: .* is a local path"):
        push_to_hub(model, "someone/head", api=RecordingApi(), backbone_id=str(backbone))
    api = RecordingApi()
    push_to_hub(
        model,
        "someone/head",
        api=api,
        results=RUN_RESULTS | {"config": RUN_RESULTS["config"] | {"backbone": str(backbone)}},
        backbone_id="someone/tiny-bert",
    )
    files = uploaded(api)
    config = json.loads(files["config.json"])
    assert config["backbone_name_or_path"] == "someone/tiny-bert"
    assert config["encoder_config"]["_name_or_path"] == "someone/tiny-bert"
    assert not any(str(backbone).encode() in content for content in files.values())
    assert model.config.backbone_name_or_path == str(backbone)  # the model in memory is left as it was


def test_a_full_push_of_a_locally_known_backbone_records_no_local_path(backbone, tmp_path):
    model = RobertaDWAttForTokenClassification.from_backbone(str(backbone), num_labels=5)
    api = RecordingApi()
    push_to_hub(
        model, "someone/full", api=api, heads_only=False, results=RUN_RESULTS | {"config": {"backbone": str(backbone)}}
    )
    files = uploaded(api)
    assert not any(str(backbone).encode() in content for content in files.values())
    assert json.loads(files["config.json"])["backbone_name_or_path"] is None


def test_the_packaged_default_backbone_is_pushed_under_its_hub_id(minilm_path):
    from dwatt.defaults import DEFAULT_BACKBONE_HUB_ID
    from dwatt.hub import backbone_hub_id

    model = type("Model", (), {"config": type("Config", (), {"backbone_name_or_path": str(minilm_path)})()})()
    assert backbone_hub_id(model) == DEFAULT_BACKBONE_HUB_ID == "sentence-transformers/all-MiniLM-L6-v2"


TOKENIZER_SCRIPT = """
    import builtins, json, logging, sys
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging
    asked, warned = [], []
    builtins.input = lambda prompt="": asked.append(prompt) or "n"
    class Kept(logging.Handler):
        def emit(self, record):
            warned.append(record.getMessage())
    hf_logging.get_logger().addHandler(Kept(logging.WARNING))
    folder = sys.argv[1] if len(sys.argv) > 1 else {folder!r}
    trusted = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    seen = {{"ids": trusted("peter blackburn")["input_ids"], "asked": list(asked), "warned": list(warned)}}
    AutoTokenizer.from_pretrained(folder)
    print(json.dumps(seen | {{"asked_without": asked}}))
"""


def test_a_checkpoint_tokenizer_loads_without_a_remote_code_prompt_or_warning(tiny_backbone, tmp_path):
    """Why transformers asks: AutoTokenizer reads the folder's config.json through AutoConfig first, and its
    `auto_map` names the remote configuration class. `trust_remote_code=True` (what the model card and README show:
    the files the model line trusts) loads the very tokenizer of the backbone with no prompt and no warning
    (`trust_remote_code=False` warns that a dwatt config is read as a plain one)."""
    import subprocess
    import sys
    import textwrap

    from transformers import AutoTokenizer

    from .conftest import BLOCKED_IMPORTS

    folder = tmp_path / "checkpoint"
    RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=5).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(folder)
    script = BLOCKED_IMPORTS + textwrap.dedent(TOKENIZER_SCRIPT.format(folder=str(folder)))
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["asked"] == [] and seen["warned"] == []
    assert seen["ids"] == AutoTokenizer.from_pretrained(tiny_backbone)("peter blackburn")["input_ids"]
    assert any("custom code" in prompt for prompt in seen["asked_without"])  # the cause, as this transformers has it
    card = model_card(
        RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=5),
        RUN_RESULTS,
        "someone/ner",
        has_tokenizer=True,
    )
    assert 'AutoTokenizer.from_pretrained("someone/ner", trust_remote_code=True)' in card
    backbone_only = model_card(
        RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=5),
        RUN_RESULTS,
        "someone/ner",
        has_tokenizer=False,
    )
    # a plain backbone: nothing to trust; a folder of this machine named by its name
    assert f'AutoTokenizer.from_pretrained("{tiny_backbone.name}")' in backbone_only


def test_a_probe_ensemble_pushes_as_one_repo_that_runs_by_its_id_from_the_hub_cache(tiny_backbone, tmp_path):
    folder = an_ensemble("ner", tiny_backbone, tmp_path / "ensemble")
    api = RecordingApi()
    push_run(folder, "someone/ensemble", api=api, backbone_id="someone/tiny-bert")
    files = uploaded(api)
    # The head-only member names a backbone folder that is not there (the ensemble copied elsewhere): the push needs
    # only its head, and sends the same files.
    moved = tmp_path / "moved"
    shutil.copytree(folder, moved)
    config = json.loads((moved / "layer-1" / "model" / "config.json").read_text())
    assert config["heads_only"] is True
    (moved / "layer-1" / "model" / "config.json").write_text(
        json.dumps(config | {"backbone_name_or_path": "gone/tiny"})
    )
    again = RecordingApi()
    push_run(moved, "someone/ensemble", api=again, backbone_id="someone/tiny-bert")
    assert uploaded(again).keys() == files.keys()
    assert uploaded(again)["layer-1/model/model.safetensors"] == files["layer-1/model/model.safetensors"]
    assert api.calls[-1][2]["commit_message"] == "Upload a DWAtt probe ensemble of 2 heads"
    remote_code = {
        "modeling_dwatt.py",
        "configuration_dwatt.py",
        "backbones_dwatt.py",
        "depth_dwatt.py",
        "fusions_dwatt.py",
        "lora_dwatt.py",
        "pretrained_dwatt.py",
        "specs_dwatt.py",
        "base_model_dwatt.py",
    }
    assert {name for name in files if "/" not in name} == {"ensemble.json", "README.md"} | remote_code
    assert json.loads(files["ensemble.json"])["members"] == ["layer-2/model", "layer-1/model"]
    for member in ("layer-2/model", "layer-1/model"):
        assert {
            f"{member}/{name}" for name in ("config.json", "model.safetensors", "README.md", "tokenizer.json")
        } <= set(files)
        config = json.loads(files[f"{member}/config.json"])
        assert config["heads_only"] is True and config["backbone_name_or_path"] == "someone/tiny-bert"
        (tmp_path / "member.safetensors").write_bytes(files[f"{member}/model.safetensors"])
        with safe_open(str(tmp_path / "member.safetensors"), "pt") as stored:
            assert not any(key.startswith("dwatt.backbone.") for key in stored.keys())
        assert f'"someone/ensemble", subfolder="{member}"' in files[f"{member}/README.md"].decode()
    card = files["README.md"].decode()
    assert "base_model: someone/tiny-bert" in card and 'dwatt predict someone/ensemble "..."' in card
    assert not any(str(tmp_path).encode() in content for content in files.values())
    # Pulled by its id: the uploaded files as the Hub cache holds them, beside the backbone's; offline.
    cache, snapshot = tmp_path / "hf" / "hub", tmp_path / "snapshot"
    for name, content in files.items():
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).write_bytes(content)
    lay_out_snapshot(cache, "someone/ensemble", "c" * 40, snapshot, main=True)
    lay_out_snapshot(cache, "someone/tiny-bert", "d" * 40, tiny_backbone, main=True)
    env = os.environ | {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    printed = [
        subprocess.run(
            [sys.executable, "-m", "dwatt.cli", "predict", source, "peter blackburn rejects", "--quiet"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        for source in (str(folder), "someone/ensemble")
    ]
    assert [done.returncode for done in printed] == [0, 0], printed[1].stderr[-2000:]
    assert printed[1].stdout == printed[0].stdout and "peter" in printed[0].stdout
    # Each member alone, from its subfolder, by transformers with the repo's remote code (which it looks for at the
    # repo's top) and without dwatt: the member's own logits.
    ids = torch.tensor([[2, 5, 6, 7, 3]])
    member, _, _ = load_checkpoint(folder / "layer-2" / "model")
    with torch.no_grad():
        torch.save(
            {"ids": ids, "logits": member(input_ids=ids, attention_mask=torch.ones_like(ids)).logits},
            tmp_path / "member.pt",
        )
    run_without_dwatt(
        f"""
        import torch
        from transformers import AutoModelForTokenClassification
        saved = torch.load({str(tmp_path / "member.pt")!r})
        model = AutoModelForTokenClassification.from_pretrained("someone/ensemble", subfolder="layer-2/model",
                                                                trust_remote_code=True).eval()
        with torch.no_grad():
            logits = model(input_ids=saved["ids"], attention_mask=torch.ones_like(saved["ids"])).logits
        torch.testing.assert_close(logits, saved["logits"])
    """,
        tmp_path,
        HF_HUB_CACHE=str(cache),
    )
