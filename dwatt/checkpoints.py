"""Loading a saved DWAtt checkpoint (a `dwatt train` model folder, a head-only folder, or a Hub id) with its task, and
the format of a probe ensemble's folder (`ensemble.json` beside its members' checkpoints; run as one model by
`dwatt.serving.ensemble`)."""

from __future__ import annotations

from pathlib import Path

from pretrained_dwatt import BACKBONE_PREFIX

from .atomic import read_json, write_json_atomically
from .auto import register_auto_classes
from .data.files import is_local_path
from .head_stack import head_tensors
from .tasks import TASKS, model_class, task_of_architectures
from .tokenization import load_tokenizer


def checkpoint_task(config) -> str:
    """The task's name (`"ner"`, `"mlm"`, `"cls"`, ...), from the architecture and problem type a checkpoint's config
    records."""
    task = task_of_architectures(getattr(config, "architectures", None), getattr(config, "problem_type", None))
    if task is not None:
        return task.name
    raise ValueError(
        f"the checkpoint's config names no DWAtt task model (architectures: {getattr(config, 'architectures', None)}); "
        "expected a token-classification, masked-LM or sequence-classification checkpoint saved by dwatt"
    )


# Files of a checkpoint folder that are JSON, checked before transformers reads them (its errors name no file).
JSON_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "model.safetensors.index.json",
)


def check_checkpoint_folder(path: str | Path) -> None:
    """A local checkpoint folder as far as dwatt can check it before loading: it exists (a path that is not there is
    named as such, not as a malformed Hub id), has a `config.json`, its JSON files parse, and a `dtype` it records is
    one torch knows. Every error names the file (and line or key). A Hub id passes through."""
    text = str(path)
    folder = Path(text).expanduser()
    if not folder.exists():
        if text.startswith((".", "/", "~")) or text.count("/") > 1 or "\\" in text:
            raise FileNotFoundError(f"{path}: no checkpoint folder there")
        return  # a Hub id: the Hub (or its cache) answers
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder / 'config.json'}: missing; {path} is not a checkpoint folder")
    for name in JSON_FILES:
        file = folder / name
        if not file.is_file():
            continue
        content = read_json(file)
        if name == "config.json":
            check_dtypes(content, file)


def check_dtypes(config: dict, file: Path, prefix: str = "") -> None:
    """`dtype` / `torch_dtype` of a config (and of its nested encoder config) name a torch dtype, or `auto`."""
    import torch

    for key in ("dtype", "torch_dtype"):
        value = config.get(key)
        if value is not None and value != "auto" and not isinstance(getattr(torch, str(value), None), torch.dtype):
            raise ValueError(
                f"{file}: {prefix}{key} {value!r} is not a torch dtype (float32, float16, bfloat16, or auto)"
            )
    if isinstance(config.get("encoder_config"), dict):
        check_dtypes(config["encoder_config"], file, "encoder_config.")


def load_checkpoint(path: str | Path):
    """The model (in eval mode), its tokenizer and its task (`checkpoint_task`) from a checkpoint folder or id, with
    this package's model classes (registered with the Auto classes first)."""
    import transformers
    from transformers import AutoConfig

    register_auto_classes()
    check_checkpoint_folder(path)
    config = AutoConfig.from_pretrained(path)
    task = checkpoint_task(config)
    auto = getattr(transformers, TASKS[task].auto_class)
    return auto.from_pretrained(path, config=config).eval(), load_tokenizer(path), task


def head_on_meta(config, tensors: dict, path: str | Path, adopt_missing=None):
    """
    The task model of a head-only checkpoint (its `config` and stored `tensors`; `path` names it in errors) without
    a backbone of its own: built on the meta device, so no backbone weight is read or allocated, with its head
    tensors (every tensor but the backbone's) assigned; the caller gives it a backbone or saves its head. A head
    tensor the checkpoint lacks raises, naming it, unless `adopt_missing(model, missing)` fills it and returns those
    still missing (a masked-LM head that did not train is the backbone's own).
    """
    import torch

    config.heads_only = False  # built whole, its backbone on the meta device
    with torch.device("meta"):
        model = model_class(checkpoint_task(config))(config)
    head = {key: value for key, value in tensors.items() if not key.startswith(BACKBONE_PREFIX)}
    missing = sorted(key for key in head_tensors(model) if key not in head)
    if missing and adopt_missing is not None:
        missing = adopt_missing(model, missing)
    if missing:
        raise ValueError(
            f"{path}: the head-only checkpoint lacks {len(missing)} head weights: {', '.join(missing[:8])}"
        )
    model.load_state_dict(head, strict=False, assign=True)
    return model.eval()


def stored_keys(folder: str | Path) -> set[str]:
    """The names of the tensors a local checkpoint folder stores (one safetensors file, or the shards of its index)."""
    from safetensors import safe_open

    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return set(read_json(index).get("weight_map", {}))
    with safe_open(str(folder / "model.safetensors"), "pt") as stored:
        return set(stored.keys())


ENSEMBLE_FILE = "ensemble.json"


def is_ensemble(path: str | Path) -> bool:
    """Whether `path` (a folder, or a Hub repo id: its manifest fetched into the Hub cache) holds a probe ensemble."""

    if is_local_path(path):
        return (Path(path) / ENSEMBLE_FILE).is_file()
    from transformers.utils import cached_file

    try:
        return cached_file(str(path), ENSEMBLE_FILE, _raise_exceptions_for_missing_entries=False) is not None
    except OSError:  # no such repo, or none in the cache offline: not an ensemble; loading it as a checkpoint says why
        return False


def ensemble_folder(path: str | Path) -> Path:
    """The local folder of the probe ensemble at `path`: the folder itself, or a Hub repo's snapshot (every member,
    fetched into the Hub cache; offline, the cached one)."""

    if is_local_path(path):
        return Path(path)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(path)))


def write_ensemble(folder: str | Path, members: list[str], about: dict) -> Path:
    """`ensemble.json` in `folder`: the members' checkpoint folders relative to it, best layer first, and `about`
    (how they were chosen)."""
    path = Path(folder) / ENSEMBLE_FILE
    write_json_atomically(path, {"members": members, **about})
    return path


def member_folders(folder: str | Path) -> list[Path]:
    """The members' checkpoint folders an ensemble folder lists, each checked to be there."""
    folder = Path(folder)
    manifest = read_json(folder / ENSEMBLE_FILE)
    members = manifest.get("members") if isinstance(manifest, dict) else None
    if not isinstance(members, list) or not members or not all(isinstance(m, str) for m in members):
        raise ValueError(f"{folder / ENSEMBLE_FILE}: 'members' must be a list of the members' folders")
    paths = [folder / member for member in members]
    missing = [str(path) for path in paths if not (path / "config.json").is_file()]
    if missing:
        raise FileNotFoundError(f"{folder / ENSEMBLE_FILE}: the member {missing[0]} has no checkpoint (config.json)")
    unweighted = [path for path in paths if not any((path / name).is_file() for name in WEIGHT_FILES)]
    if unweighted:
        raise FileNotFoundError(
            f"{unweighted[0] / WEIGHT_FILES[0]}: missing; the member {unweighted[0].name} of "
            f"{folder / ENSEMBLE_FILE} has no weights: save the probe's ensemble again"
        )
    return paths


# What holds a local checkpoint's weights: one file, or the index of its shards.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")


__all__ = [
    "ENSEMBLE_FILE",
    "check_checkpoint_folder",
    "checkpoint_task",
    "ensemble_folder",
    "is_ensemble",
    "load_checkpoint",
    "member_folders",
    "stored_keys",
    "write_ensemble",
]
