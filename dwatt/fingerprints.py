"""What a run reads, known by content: a local backbone folder by the sha256 of its config and weight files, a local
data folder by the sha256 of its files. A committed row names a folder outside the working folder by its name alone
(`dwatt.portable.portable_path`), so two folders of one name -- or one folder whose files changed in place -- are told
apart only by these. Each folder is hashed once per process as it stands (names, sizes and times key the memo).
Torch-free: the results store, the feature cache and the kept heads of a group all read it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from .atomic import read_text, sha256_of
from .portable import backbone_folder

WEIGHT_FILES = ("config.json", "*.safetensors", "*.bin")


def config_digest(path: Path) -> str:
    """sha256 of a model's config.json as it computes: its keys but those saying where it came from (`_name_or_path`,
    `_commit_hash` and other private keys, `transformers_version`), in a canonical order. A folder written twice by
    one conversion (into two temporary folders) or saved again by a newer transformers is the same backbone."""
    config = json.loads(read_text(path))
    computing = {
        key: value for key, value in config.items() if not key.startswith("_") and key != "transformers_version"
    }
    return hashlib.sha256(json.dumps(computing, sort_keys=True).encode()).hexdigest()


def _stamp(files: list[Path]) -> tuple:
    return tuple((str(path), path.stat().st_size, path.stat().st_mtime_ns) for path in files)


@functools.lru_cache(maxsize=64)
def _digest_of_files(root: Path, stamp: tuple, config_by_content: bool) -> str:
    """sha256 of the relative names and digests of the files `stamp` lists (config.json's by `config_digest` where
    `config_by_content`); `stamp` (names, sizes, times) keys the memo."""
    files = [Path(name) for name, _, _ in stamp]
    digests = [
        config_digest(path) if config_by_content and path.name == "config.json" else sha256_of(path) for path in files
    ]
    return hashlib.sha256(
        "".join(f"{path.relative_to(root).as_posix()}\0{digest}\n" for path, digest in zip(files, digests)).encode()
    ).hexdigest()


def backbone_fingerprint(backbone: str | None, verbatim: bool = False) -> str | None:
    """sha256 of a local backbone folder's config and weight files, None for a Hub id. `verbatim` hashes config.json's
    bytes, as rows written before `config_digest` did."""
    folder = Path(backbone_folder(backbone))
    if not folder.is_dir():
        return None
    files = sorted({path for pattern in WEIGHT_FILES for path in folder.glob(pattern) if path.is_file()})
    return _digest_of_files(folder, _stamp(files), not verbatim)


def data_fingerprint(data_dir: str | Path | None) -> str | None:
    """sha256 of every file under a local data folder (hidden files and folders aside: locks, caches), None where no
    folder is given (the vendored splits, which the code version fixes) or the name is not a folder (a Hub dataset)."""
    if data_dir is None or not Path(data_dir).is_dir():
        return None
    folder = Path(data_dir)
    files = sorted(
        path
        for path in folder.rglob("*")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    )
    return _digest_of_files(folder, _stamp(files), False)


def run_fingerprints(backbone: str | None, data_dir: str | Path | None) -> dict[str, str | None]:
    """What a run reads, by content: `backbone_sha256` and `data_sha256`, as rows and kept heads record them."""
    return {"backbone_sha256": backbone_fingerprint(backbone), "data_sha256": data_fingerprint(data_dir)}


__all__ = ["backbone_fingerprint", "config_digest", "data_fingerprint", "run_fingerprints"]
