"""How files that may be committed name backbones and folders: the same on any machine.

A results file or a benchmark's record is read elsewhere, so it never names a folder of the machine it was made on
(a virtual environment's site-packages, a home or temporary folder). Backbones are recorded by their Hub id where
one is known (a Hub id itself, or the packaged default MiniLM, whose Hub id `backbone_folder` resolves back to the
package offline), paths inside the working folder (the repository, for committed results) relative to it, and any
other absolute path by its last part: a model folder by its name, a run folder by its place under the sweep's
output root.
"""

from __future__ import annotations

import os
from pathlib import Path

from .defaults import DEFAULT_BACKBONE_HUB_ID, DEFAULT_BACKBONE_PACKAGE, default_backbone_path, known_hub_id

# The fields of a run's results (and of a sweep row's spec) that hold paths.
PATH_FIELDS = ("backbone", "data_dir", "output_dir", "feature_cache_dir")
RUN_FOLDER_FIELDS = ("output_dir", "feature_cache_dir")  # recorded relative to the sweep's output root


def backbone_folder(name_or_path: str | None) -> str:
    """Where to load a backbone from: the packaged MiniLM folder for `None` and for its Hub id when the package is
    installed (so that a recorded `sentence-transformers/all-MiniLM-L6-v2` runs offline); anything else as given."""
    if name_or_path is None:
        return str(default_backbone_path())
    if name_or_path == DEFAULT_BACKBONE_HUB_ID:
        try:
            return str(default_backbone_path())
        except FileNotFoundError:
            return name_or_path  # online, the Hub has it
    return str(name_or_path)


def portable_path(path: str | Path | None, root: str | Path | None = None) -> str | None:
    """`path` as a committed file may record it: the packaged default backbone by its Hub id; a relative path (or a
    Hub id) as given; an absolute one inside `root` (default: the working folder) relative to it; any other absolute
    path by its name."""
    if path is None:
        return None
    text = str(path)
    hub_id = known_hub_id(text) if os.path.isabs(text) else None
    if hub_id:
        return hub_id
    if not os.path.isabs(text):
        return text
    resolved, base = Path(text).resolve(), Path(root or os.getcwd()).resolve()
    if resolved == base or base in resolved.parents:
        return str(resolved.relative_to(base)) or "."
    return resolved.name


def portable_results(results: dict, output_root: str | Path | None = None) -> dict:
    """A run's results (or a sweep row) with the paths of its `config` and `spec` made portable: its output folder
    relative to `output_root` (a sweep's; default: the working folder), the backbone and data folder by
    `portable_path`. The scores are untouched."""
    out = dict(results)
    for part in ("config", "spec"):
        if isinstance(out.get(part), dict):
            fields = dict(out[part])
            for key in PATH_FIELDS:
                if key in fields:
                    fields[key] = portable_path(fields[key], output_root if key in RUN_FOLDER_FIELDS else None)
            out[part] = fields
    return out


def backbone_label(backbone: str | None) -> str:
    """A short name for a backbone: the Hub id's or folder's last part (its parent's for a folder called `model`);
    the packaged default backbone by the name of the Hub model it ships, wherever it was installed."""
    path = Path(str(backbone))
    if backbone is None or DEFAULT_BACKBONE_PACKAGE in path.parts:
        return DEFAULT_BACKBONE_HUB_ID.split("/")[-1]
    return path.parent.name if path.name == "model" and path.parent.name else path.name


def portable_command(arguments: list[str]) -> list[str]:
    """Command-line arguments with every absolute path (alone or in a comma-separated list) made portable."""
    return [
        ",".join(portable_path(part) if os.path.isabs(part) else part for part in argument.split(","))
        for argument in arguments
    ]


__all__ = ["PATH_FIELDS", "backbone_folder", "backbone_label", "portable_command", "portable_path", "portable_results"]
