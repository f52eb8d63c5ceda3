"""The Hub side: pushes of head-only (or full) checkpoints, and of probe ensembles, through huggingface_hub's upload
API, each with its model card (`dwatt.model_cards`).

Network code lives here, in the library, and never in the remote-code files that travel with checkpoints.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub import HfApi
from safetensors.torch import load_file
from transformers import AutoConfig

from .atomic import read_json, write_json_atomically
from .auto import register_auto_classes
from .checkpoints import ENSEMBLE_FILE, checkpoint_task, head_on_meta, is_ensemble, load_checkpoint, member_folders
from .data import is_local_path
from .defaults import known_hub_id
from .errors import HubError
from .lora import ADAPTER_FOLDER, save_adapter
from .model_cards import ensemble_card, model_card
from .tokenization import load_tokenizer, save_tokenizer


def explain_hub_error(error: BaseException, repo_id: str) -> str | None:
    """One line for a failure of a Hub request (offline, not logged in, refused, no such repo, bad id, no
    network), or None for an error that is not the Hub's. Matched on class names, so that huggingface_hub's
    HTTP client (httpx or its successor) does not matter."""
    names = {cls.__name__ for cls in type(error).__mro__}
    status = getattr(getattr(error, "response", None), "status_code", None)
    if "OfflineModeIsEnabled" in names:
        return "the Hub is switched off here (HF_HUB_OFFLINE=1); unset HF_HUB_OFFLINE on a machine with a network and push again"
    if "LocalTokenNotFoundError" in names or status == 401:
        return "not logged in to the Hub (no valid token); run `hf auth login` or set HF_TOKEN to a write token, then push again"
    if "HFValidationError" in names:
        return f"{repo_id!r} is not a valid repo id; expected 'user-or-org/name'"
    if "RepositoryNotFoundError" in names or status == 404:
        return f"the Hub has no repository {repo_id!r} that this token can see; check the repo id (user-or-org/name)"
    if status == 403:
        return f"the token may not write to {repo_id!r} (403); use a write token of its owner, or another repo id"
    if "HfHubHTTPError" in names:
        return f"the Hub refused the upload to {repo_id!r} (HTTP {status}): {str(error).splitlines()[0]}"
    if names & {"ConnectError", "TransportError", "TimeoutException", "ConnectionError", "Timeout"}:
        return f"cannot reach the Hub ({str(error).splitlines()[0] or type(error).__name__}); check the network connection and push again"
    return None


@contextmanager
def _hub_errors(repo_id: str):
    try:
        yield
    except Exception as error:
        explained = explain_hub_error(error, repo_id)
        if explained is None:
            raise
        raise HubError(explained) from error


def backbone_hub_id(model, backbone_id: str | None = None) -> str | None:
    """The backbone's Hub id for a pushed config: `backbone_id` when given, else the recorded name when it is a
    Hub id, or the Hub id of a folder dwatt knows (the packaged default backbone); None when the backbone is known
    only by a local path."""
    if backbone_id:
        if is_local_path(backbone_id):
            raise ValueError(
                f"--backbone-id: {backbone_id!r} is a local path; give the backbone's Hub id (user-or-org/name)"
            )
        return backbone_id
    recorded = model.config.backbone_name_or_path
    if recorded and not is_local_path(recorded):
        return recorded
    return known_hub_id(recorded) if recorded else None


@contextmanager
def _published_backbone(model, backbone_id: str | None):
    """The model's config as it goes out: the backbone named by its Hub id (or, for a full checkpoint whose
    backbone is known only by a local path, by nothing), never by a path that means nothing elsewhere."""
    config = model.config
    saved = config.backbone_name_or_path, getattr(config.encoder_config, "_name_or_path", "")
    config.backbone_name_or_path = backbone_id
    config.encoder_config._name_or_path = backbone_id or ""
    try:
        yield
    finally:
        config.backbone_name_or_path, config.encoder_config._name_or_path = saved


def push_to_hub(
    model,
    repo_id: str,
    *,
    heads_only: bool = True,
    results: dict | None = None,
    tokenizer=None,
    commit_message: str | None = None,
    private: bool | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    backbone_id: str | None = None,
    api: HfApi | None = None,
) -> str:
    """
    Save `model` (head-only by default) with a generated model card into a temporary folder and upload it as one
    commit with `HfApi.upload_folder`. Returns the commit URL.

    The pushed config names the backbone by its Hub id (`backbone_id`, e.g. `"sentence-transformers/all-MiniLM-L6-v2"`;
    by default the recorded one when it is a Hub id), never by a local folder: a head-only push of a model whose
    backbone is known only by a local path is refused, and a full push then records no backbone name. A failed
    Hub request raises `HubError` with one line saying what to do.
    """
    published = _published_id(model, backbone_id, heads_only)
    api = api or HfApi(token=token)
    with _hub_errors(repo_id):
        repo_id = api.create_repo(repo_id, private=private, token=token, exist_ok=True).repo_id
    with tempfile.TemporaryDirectory() as folder:
        _save_for_hub(model, Path(folder), published, heads_only, results, tokenizer, repo_id)
        kind = "head-only" if heads_only else "full"
        message = commit_message or f"Upload {kind} DWAtt checkpoint ({model.config.fusion})"
        return _upload(api, repo_id, folder, message, token, revision, create_pr)


def _published_id(model, backbone_id: str | None, heads_only: bool) -> str | None:
    """The backbone's Hub id a push records (`backbone_hub_id`); a head-only push without one is refused."""
    published = backbone_hub_id(model, backbone_id)
    if heads_only and published is None:
        raise ValueError(
            f"a head-only push needs the backbone's Hub id, and this model knows its backbone only by the local path "
            f"{model.config.backbone_name_or_path!r}; pass backbone_id= (--backbone-id), e.g. "
            "'sentence-transformers/all-MiniLM-L6-v2', or push the full model (--full)"
        )
    return published


def _save_for_hub(
    model,
    folder: Path,
    published: str | None,
    heads_only: bool,
    results: dict | None,
    tokenizer,
    repo_id: str,
    subfolder: str | None = None,
) -> None:
    """`model` as it goes out, into `folder` (the repo's `subfolder`): its weights (head-only or full), config naming
    the backbone by `published`, tokenizer, results and model card."""
    with _published_backbone(model, published):
        model.save_pretrained(folder, heads_only=heads_only)
        save_adapter(model, folder / ADAPTER_FOLDER, published)
        if tokenizer is not None:
            save_tokenizer(tokenizer, folder)
        if results is not None:
            (folder / "results.json").write_text(
                json.dumps(_without_local_backbone(results, published), indent=2, default=str) + "\n"
            )
        (folder / "README.md").write_text(
            model_card(model, results, repo_id, heads_only, has_tokenizer=tokenizer is not None, subfolder=subfolder)
        )


def _upload(
    api: HfApi,
    repo_id: str,
    folder: str | Path,
    message: str,
    token,
    revision: str | None = None,
    create_pr: bool = False,
) -> str:
    """`folder` uploaded to `repo_id` as one commit; the commit's URL."""
    with _hub_errors(repo_id):
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            commit_message=message,
            token=token,
            revision=revision,
            create_pr=create_pr,
        )
    return str(getattr(commit, "commit_url", commit))


def push_ensemble(
    folder: str | Path,
    repo_id: str,
    *,
    heads_only: bool = True,
    backbone_id: str | None = None,
    commit_message: str | None = None,
    private: bool | None = None,
    token: str | bool | None = None,
    api: HfApi | None = None,
    **upload,
) -> str:
    """
    Push a probe ensemble's folder (`dwatt probe --save-ensemble K`) as one repo, in one commit: `ensemble.json`, a
    model card and the remote-code files at the top, each member (head-only by default: its head weights, config,
    tokenizer, results and card)
    in its own subfolder, as in the folder. `dwatt predict REPO` and `load_ensemble(REPO)` run it from the Hub (one
    backbone, named by its Hub id as in `push_to_hub`); each member also loads alone with
    `AutoModel...from_pretrained(REPO, subfolder="layer-<k>/model", trust_remote_code=True)`. `upload`: `revision`,
    `create_pr`, as for `push_to_hub`.
    """

    folder = Path(folder)
    manifest = read_json(folder / ENSEMBLE_FILE)
    paths = member_folders(folder)
    members = [_member_to_push(path, heads_only) for path in paths]
    published = {_published_id(model, backbone_id, heads_only) for model, _, _ in members}
    if len(published) > 1:  # load_ensemble refuses members of two backbones; a copied folder could still hold them
        raise ValueError(
            f"{folder / ENSEMBLE_FILE}: its members name different backbones ({sorted(map(str, published))})"
        )
    [backbone] = published
    api = api or HfApi(token=token)
    with _hub_errors(repo_id):
        repo_id = api.create_repo(repo_id, private=private, token=token, exist_ok=True).repo_id
    with tempfile.TemporaryDirectory() as staging:
        staging = Path(staging)
        for path, name, (model, tokenizer, _) in zip(paths, manifest["members"], members):
            results = path.parent / "results.json"
            (staging / name).mkdir(parents=True)
            _save_for_hub(
                model,
                staging / name,
                backbone,
                heads_only,
                read_json(results) if results.is_file() else None,
                tokenizer,
                repo_id,
                subfolder=name,
            )
        # transformers looks for a subfolder's remote code at the repo's top (get_class_from_dynamic_module takes no
        # subfolder): the members' files, the same for each, go there too
        for code in sorted((staging / manifest["members"][0]).glob("*_dwatt.py")):
            shutil.copyfile(code, staging / code.name)
        write_json_atomically(staging / ENSEMBLE_FILE, manifest)
        (staging / "README.md").write_text(ensemble_card(folder, manifest, repo_id, backbone, members[0][0]))
        message = commit_message or f"Upload a DWAtt probe ensemble of {len(paths)} heads"
        return _upload(api, repo_id, staging, message, token, **upload)


def _member_to_push(path: Path, heads_only: bool):
    """An ensemble member as `push_ensemble` saves it (model, tokenizer, task). A head-only member pushed head-only
    needs only its head: it is built on the meta device with its stored tensors, never loading the backbone it
    names (a local folder, perhaps, that is not where the ensemble now is: the folder alone runs, and pushes). Any
    other is loaded whole (`load_checkpoint`)."""

    if not (heads_only and read_json(path / "config.json").get("heads_only")):
        return load_checkpoint(path)
    register_auto_classes()
    config = AutoConfig.from_pretrained(path)
    task = checkpoint_task(config)
    return head_on_meta(config, load_file(path / "model.safetensors"), path), load_tokenizer(str(path)), task


def _without_local_backbone(results: dict, published: str | None) -> dict:
    """A run's results as they go out: the backbone by its Hub id (or none), as in the pushed config."""
    config = dict(results.get("config", {}))
    if "backbone" in config:
        config["backbone"] = published
    return results | {"config": config} if "config" in results else results


def push_run(run_dir: str | Path, repo_id: str, **kwargs) -> str:
    """Push a finished `dwatt train` run directory (its `model/` and `results.json`), or a probe ensemble's folder
    (`push_ensemble`)."""

    if is_ensemble(run_dir):
        return push_ensemble(run_dir, repo_id, **kwargs)
    run_dir = Path(run_dir)
    results_file, model_dir = run_dir / "results.json", run_dir / "model"
    if not results_file.is_file() or not model_dir.is_dir():
        raise FileNotFoundError(
            f"{run_dir}: not a finished run (needs results.json and model/; was it trained with --no-save?)"
        )
    results = read_json(results_file)
    model, tokenizer, _ = load_checkpoint(model_dir)
    return push_to_hub(model, repo_id, results=results, tokenizer=tokenizer, **kwargs)
