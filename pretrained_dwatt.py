# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""Pretrained backbones and head-only checkpoints for DWAtt's models, as functions their methods call (the model
shares no state with them): `load_pretrained_backbone` (a `PretrainedBackbone`: the model, where from, how deep),
`build_on_backbone` (`from_backbone`: a pretrained backbone, a fresh fusion and head), `attach_backbone`,
`save_checkpoint` (`save_pretrained`, with `heads_only=True` storing everything but the backbone, like an adapter) and
`load_checkpoint` (the one `from_pretrained`, which fetches a head-only checkpoint's backbone again).

Part of DWAtt's remote code: travels with every checkpoint beside `modeling_dwatt.py`; imports only torch and
transformers.
"""

import copy
import difflib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, PretrainedConfig, PreTrainedModel
from transformers.utils import logging

try:
    from .backbones_dwatt import _quiet_loading, backbone_kwargs, per_layer_settings
    from .configuration_dwatt import DWAttConfig
    from .depth_dwatt import cut_config, refuse_unused_layers
    from .lora_dwatt import _lora_key, adapted_layers, low_rank_delta
except ImportError:  # a top-level module of the installed project, not remote code
    # Nested, so that the import scan of older transformers (4.46: a regular expression that skips the body of a `try`,
    # not of its `except`) does not take these modules for packages the remote code needs.
    try:
        from backbones_dwatt import _quiet_loading, backbone_kwargs, per_layer_settings
        from configuration_dwatt import DWAttConfig
        from depth_dwatt import cut_config, refuse_unused_layers
        from lora_dwatt import _lora_key, adapted_layers, low_rank_delta
    except ImportError as error:
        raise ImportError(f"{__name__} needs the other *_dwatt.py files beside it") from error

logger = logging.get_logger(__name__)

BACKBONE_PREFIX = "dwatt.backbone."
# What must agree between a head-only checkpoint's recorded encoder and the backbone it is applied to.
BACKBONE_IDENTITY = (
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)
HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder")


def refuse_lookalike_arguments(config_kwargs: dict) -> None:
    """A keyword argument that no config takes but that looks like one of `DWAttConfig`'s (`layers` for
    `fused_layers`) is refused: the config would keep it as an attribute that nothing reads."""
    own = [name for name in inspect.signature(DWAttConfig.__init__).parameters if name not in ("self", "kwargs")]
    known = {*own, *inspect.signature(PretrainedConfig.__init__).parameters, "num_labels"}
    for key in config_kwargs:
        close = difflib.get_close_matches(key, own, n=1, cutoff=0.6) if key not in known else []
        if close:
            raise TypeError(
                f"{key!r} is not an argument of DWAttConfig (nothing would read it); did you mean {close[0]!r}?"
            )


@dataclass
class PretrainedBackbone:
    """A pretrained model as a DWAtt model starts from it: `model` (its base model is the backbone; a masked LM's
    head beside it), where it was loaded from (`source`), and how many layers the pretrained backbone has (`layers`),
    whatever depth was loaded."""

    model: PreTrainedModel
    source: str
    layers: int

    @property
    def backbone(self) -> PreTrainedModel:
        return self.model.base_model


def load_pretrained_backbone(
    name_or_path: str,
    load_kwargs: dict,
    depth: int | None = None,
    dtype: torch.dtype | str | None = None,
    masked_lm_head: bool = False,
) -> PretrainedBackbone:
    """The pretrained backbone `name_or_path` (with its masked-LM head where asked, loaded with a warning where it
    ships none), its first `depth` layers only where given (the weights past them are not read), in `dtype`."""
    config = AutoConfig.from_pretrained(name_or_path, **load_kwargs)
    layers, cut = config.num_hidden_layers, cut_config(config, depth)
    # the checkpoint's pooler weights (and layers past `depth`) are unused on purpose: no load report
    with _quiet_loading(not masked_lm_head or cut.num_hidden_layers < layers):
        model, info = (AutoModelForMaskedLM if masked_lm_head else AutoModel).from_pretrained(
            name_or_path,
            config=cut,
            output_loading_info=True,
            **({} if masked_lm_head else backbone_kwargs(cut)),
            **({"dtype": dtype} if dtype is not None else {}),
            **load_kwargs,
        )
    head_missing = [key for key in info["missing_keys"] if not key.startswith(model.base_model_prefix + ".")]
    if masked_lm_head and head_missing:
        logger.warning(
            f"{name_or_path} ships no pretrained masked-LM head ({len(head_missing)} weights missing); the head "
            "starts from fresh weights, its vocabulary projection from the input embeddings."
        )
    return PretrainedBackbone(model, str(name_or_path), layers)


def build_on_backbone(
    model_class: type,
    name_or_path: str,
    fusion: str = "dwatt",
    num_labels: int | None = None,
    *,
    revision: str | None = None,
    dtype: torch.dtype | str | None = None,
    backbone_dtype: torch.dtype | str | None = None,
    load_kwargs: dict | None = None,
    **config_kwargs,
) -> PreTrainedModel:
    r"""
    Build a model whose backbone carries the pretrained weights of `name_or_path` (a Hub id such as
    `"roberta-large"` or a local folder) and whose fusion module and head are freshly initialised: the usual
    starting point for training. Only the backbone layers the model runs are loaded.

    Args:
        name_or_path (`str`): the pretrained encoder.
        fusion (`str`): see [`DWAttConfig`].
        num_labels (`int`, *optional*): size of the token-classification head (or pass `id2label`).
        revision (`str`, *optional*): branch, tag or commit of the backbone; recorded in the config.
        dtype (`torch.dtype` or `str`, *optional*): dtype of the whole model.
        backbone_dtype (`torch.dtype` or `str`, *optional*): dtype the backbone's weights load in (`"auto"`: as
            saved); the fusion and head stay in the default dtype. Default: `from_pretrained`'s.
        load_kwargs (`dict`, *optional*): extra arguments for the backbone's `from_pretrained`
            (`cache_dir`, `local_files_only`, `token`, `attn_implementation`, ...).
        config_kwargs: any other [`DWAttConfig`] argument (`d_pos`, `num_extra_layers`, `id2label`, ...).
    """
    refuse_lookalike_arguments(config_kwargs)
    load_kwargs = dict(load_kwargs or {})
    if revision is not None:
        load_kwargs["revision"] = revision
    if num_labels is not None:
        config_kwargs["num_labels"] = num_labels
    settings = dict(
        fusion=fusion, backbone_name_or_path=str(name_or_path), backbone_revision=revision, **config_kwargs
    )
    encoder = AutoConfig.from_pretrained(name_or_path, **load_kwargs)
    # Only the layers the model runs are loaded (a head on layer k of L: 1..k).
    depth = DWAttConfig(encoder_config=encoder, **settings).run_depth
    pretrained = model_class.load_pretrained_backbone(name_or_path, load_kwargs, depth=depth, dtype=backbone_dtype)
    config = DWAttConfig(encoder_config=uncut_config(pretrained.backbone.config, encoder), **settings)
    # Built whole, then cut: the random backbone drawn before the fusion and head is as large as an uncut one's, so
    # that a seed gives them the same weights whatever depth the model runs.
    whole = copy.deepcopy(config)
    whole.backbone_depth = encoder.num_hidden_layers
    model = model_class(whole)
    if depth < encoder.num_hidden_layers:
        model.dwatt.cut_backbone(config.backbone_depth)
    else:  # as asked (None: the default, the deepest layer read), not the depth it was built at
        model.config.backbone_depth = config.backbone_depth
    attach_backbone(model, pretrained, adopt_head=True)
    if dtype is not None:
        model.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)
    return model


def attach_backbone(model: PreTrainedModel, pretrained: PretrainedBackbone, adopt_head: bool) -> None:
    """Make a loaded pretrained backbone `model.dwatt.backbone` (in the place of the one the model was built with, in
    its dtype and device), after checking it is the architecture and shape the model was built (or trained) for;
    with `adopt_head`, the model takes the pretrained head it starts from (`adopt_pretrained_head`)."""
    ours, theirs = model.config.encoder_config, pretrained.backbone.config
    found = {key: getattr(theirs, key, None) for key in BACKBONE_IDENTITY} | {"num_hidden_layers": pretrained.layers}
    differences = [
        f"{key} {found[key]!r} instead of {getattr(ours, key, None)!r}"
        for key in BACKBONE_IDENTITY
        if found[key] != getattr(ours, key, None)
    ]
    if differences:
        raise ValueError(
            f"the backbone {pretrained.source!r} is not the one this model was built for: " + "; ".join(differences)
        )
    built, loaded = model.dwatt.backbone, pretrained.backbone
    expected = {key: tuple(value.shape) for key, value in built.state_dict().items()}
    found = {key: tuple(value.shape) for key, value in loaded.state_dict().items()}
    if expected != found:
        missing, unexpected = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
        reshaped = sorted(key for key in set(expected) & set(found) if expected[key] != found[key])
        raise ValueError(
            f"the backbone weights of {pretrained.source!r} do not fit the model built from its own config: "
            f"missing {missing[:5]}, unexpected {unexpected[:5]}, other shapes {reshaped[:5]}"
        )
    reference = next(built.parameters())
    if getattr(pretrained.model, "hf_device_map", None) is None:  # one spread over devices (device_map) stays there
        loaded.to(dtype=reference.dtype, device=None if reference.is_meta else reference.device)
    model.dwatt.use_backbone(loaded.train(built.training))
    if adopt_head:
        model.adopt_pretrained_head(pretrained)


def head_only_state_dict(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """What a head-only checkpoint of `model` stores (see `head_state_dict`)."""
    lm_head_trains = any(p.requires_grad for p in getattr(model, "lm_head", nn.Module()).parameters())
    state = {
        key: value for key, value in model.head_state().items() if lm_head_trains or not key.startswith("lm_head.")
    }
    adapted = adapted_layers(model.dwatt.backbone)
    if model.config.lora and not adapted and model.dwatt.lora is None:
        raise ValueError("this model's LoRA updates are merged into its backbone: save it whole (heads_only=False)")
    for path, (_, lora_A, lora_B) in adapted.items():
        state[f"dwatt.lora.updates.{_lora_key(path)}.lora_A"] = lora_A
        state[f"dwatt.lora.updates.{_lora_key(path)}.lora_B"] = lora_B
    return state


def merged_lora_state_dict(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """The full state of a model whose backbone carries LoRA adapters, with each adapted layer's update merged into
    its weight under the layer's own name, as a plain backbone of its family holds it."""
    adapted = adapted_layers(model.dwatt.backbone)
    scale = model.config.lora["alpha"] / model.config.lora["rank"]
    state = {}
    for key, value in model.state_dict().items():
        if ".lora_A." in key or ".lora_B." in key:
            continue
        if ".base_layer." in key:
            path = key.removeprefix(BACKBONE_PREFIX).split(".base_layer.")[0]
            key = key.replace(".base_layer.", ".")
            if key.endswith(".weight"):
                layer, lora_A, lora_B = adapted[path]
                value = value + low_rank_delta(layer, lora_A, lora_B, scale)
        state[key] = value
    return state


def save_checkpoint(model: PreTrainedModel, save: Callable, save_directory, *args, heads_only: bool, **kwargs):
    """What `save_pretrained` does: `save` (`PreTrainedModel.save_pretrained` of `model`) with the tensors a head-only
    or LoRA checkpoint stores, then the config written again as a copy that says how they are stored (the model's
    own config is never changed)."""
    if not heads_only:
        if "state_dict" in kwargs:  # the caller's own tensors (the Trainer's checkpoints, which it resumes from)
            return save(save_directory, *args, **kwargs)
        if adapted_layers(model.dwatt.backbone):  # LoRA in training: the updates merged into the backbone's layers
            state = merged_lora_state_dict(model)
        elif model.dwatt.lora is not None:  # loaded head-only: the backbone holds them already
            state = {k: v for k, v in model.state_dict().items() if not k.startswith("dwatt.lora.")}
        else:
            return save(save_directory, *args, **kwargs)
    elif not model.config.backbone_name_or_path:
        raise ValueError(
            "heads_only=True needs `config.backbone_name_or_path` (set by `from_backbone`) so that loading can find "
            "the backbone again"
        )
    else:  # the LoRA updates travel beside the head, to be merged into the backbone when it loads
        state = head_only_state_dict(model)
    if kwargs.get("push_to_hub"):
        raise ValueError(
            "save_pretrained(push_to_hub=True) of a head-only or LoRA checkpoint: save it into a folder, then upload "
            "the folder (`dwatt push`, or huggingface_hub's `upload_folder`)"
        )
    result = save(save_directory, *args, state_dict=state, **kwargs)
    config = copy.deepcopy(model.config)  # as `save` wrote it (architectures, auto_map, dtype), then how it is stored
    config.heads_only = heads_only
    if config.lora:
        config.lora["merged"] = not heads_only
    config.save_pretrained(save_directory)
    return result


def load_checkpoint(model_class: type, load: Callable, name_or_path, *model_args, **kwargs):
    """What the one `from_pretrained` does (see `DWAttPreTrainedModel.from_pretrained`); `load(cls, ...)`:
    `PreTrainedModel.from_pretrained` as `cls` (`model_class`, or the class a head-only checkpoint is read as:
    `_reading_class`)."""
    backbone_name_or_path = kwargs.pop("backbone_name_or_path", None)
    backbone_revision = kwargs.pop("backbone_revision", None)
    output_loading_info = kwargs.pop("output_loading_info", False)
    ignore_mismatched_sizes = kwargs.pop("ignore_mismatched_sizes", False)
    config = kwargs.pop("config", None)
    if config is None:
        config = DWAttConfig.from_pretrained(name_or_path, **{k: kwargs[k] for k in HUB_KWARGS if k in kwargs})
    heads_only = bool(getattr(config, "heads_only", False))
    if heads_only and not model_class.has_task_head:
        raise ValueError(
            f"{name_or_path} is a head-only checkpoint: load it with its task class (the AutoModelFor... its config's "
            f"`architectures` names), which fetches the backbone, not with {model_class.__name__}"
        )
    try:
        # the backbone's weights are missing on purpose: no load report
        with _quiet_loading(heads_only):
            model, info = load(
                _reading_class(model_class, heads_only),
                name_or_path,
                *model_args,
                config=config,
                ignore_mismatched_sizes=True,
                output_loading_info=True,
                **kwargs,
            )
    except Exception as error:
        if type(error).__name__ == "SafetensorError":  # safetensors is not imported here: match by name
            raise ValueError(f"{name_or_path}: the weights file is corrupted or truncated ({error})") from error
        raise
    model.__class__ = model_class  # read as `_reading_class`: the model is of the class asked for
    refuse_mismatched(model_class, info["mismatched_keys"], name_or_path, ignore_mismatched_sizes)
    dwatt = model.dwatt if model_class.has_task_head else model
    refuse_unused_layers(dwatt.config, dwatt.backbone, info["unexpected_keys"], name_or_path)
    missing = sorted(info["missing_keys"])
    lm_head_missing = []
    if heads_only:
        missing = [key for key in missing if not key.startswith(BACKBONE_PREFIX)]
        lm_head_missing = [key for key in missing if key.startswith("lm_head.")]
        missing = [key for key in missing if not key.startswith("lm_head.")]
    refuse_renamed_keys(missing, info["unexpected_keys"], name_or_path)
    if missing:
        raise ValueError(
            f"the checkpoint {name_or_path} lacks {len(missing)} weights the model needs: "
            f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}"
        )
    if heads_only:
        source = backbone_name_or_path or config.backbone_name_or_path
        revision = backbone_revision or config.backbone_revision
        # the revision and subfolder given are the checkpoint's, not its backbone's
        load_kwargs = {
            k: kwargs[k]
            for k in (*HUB_KWARGS, "attn_implementation")
            if k in kwargs and k not in ("revision", "subfolder")
        }
        if revision is not None:
            load_kwargs["revision"] = revision
        pretrained = model_class.load_pretrained_backbone(source, load_kwargs, depth=config.run_depth)
        attach_backbone(model, pretrained, adopt_head=bool(lm_head_missing))
        if model.dwatt.lora is not None:  # W + (alpha / rank) B A: a plain, merged backbone
            model.dwatt.lora.merge_into(model.dwatt.backbone)  # (the pairs kept, for a head-only save again)
            model.config.lora["merged"] = True
        model.config.heads_only = False
        model.config.backbone_name_or_path, model.config.backbone_revision = str(source), revision
    return (model, info) if output_loading_info else model


def refuse_mismatched(model_class: type, mismatched: list, name_or_path, ignore_mismatched_sizes: bool) -> None:
    """Refuse a checkpoint whose tensors do not fit the model, naming every mismatching key and both shapes, unless
    `ignore_mismatched_sizes` (those tensors then start afresh)."""
    if mismatched and not ignore_mismatched_sizes:
        details = "; ".join(
            f"{key}: checkpoint {tuple(stored)} vs model {tuple(expected)}"
            for key, stored, expected in sorted(mismatched)
        )
        raise ValueError(
            f"the checkpoint {name_or_path} does not fit {model_class.__name__} built from the given config: "
            f"{details}. A head trained for another label set needs `ignore_mismatched_sizes=True` to start afresh; "
            "a backbone of another shape needs the checkpoint's own config."
        )


# Weight names that transformers releases before 4.49 rename as they load any checkpoint (TensorFlow's names for a
# LayerNorm's scale and shift), so that a weight of that name never reaches its module (ScalarMix's `gamma`).
LEGACY_RENAMES = {"gamma": "weight", "beta": "bias"}


def refuse_renamed_keys(missing: list[str], unexpected: list[str], name_or_path) -> None:
    """Refuse, in one line naming the release that loads it, a checkpoint whose weights the running transformers
    renamed on the way (`LEGACY_RENAMES`): the model would miss them."""
    for key in missing:
        stem, _, last = key.rpartition(".")
        if last in LEGACY_RENAMES and f"{stem}.{LEGACY_RENAMES[last]}" in unexpected:
            raise ValueError(
                f"{name_or_path}: transformers {transformers.__version__} renames the weight {key} to "
                f"{LEGACY_RENAMES[last]!r} as it loads it, so the model misses it; load this checkpoint with "
                "transformers >= 4.49"
            )


def _reading_class(model_class: type, heads_only: bool) -> type:
    """The class a checkpoint is read as: `model_class`, or for a head-only checkpoint a subclass of it without a
    base-model prefix, so that transformers reads its keys as they are stored: 4.x releases take a file without a
    `dwatt.` tensor (a Base head's: its classifier only) for a base model's weights and refuse it (4.57), or fail on it
    (4.46, a `NameError` in its loader, which reads the class's prefix where 4.57 reads the instance's). A class of its
    own for the load, not `model_class` changed while it runs: loads in other threads see `model_class` as it is."""
    if not heads_only:
        return model_class
    return type(
        model_class.__name__,
        (model_class,),
        {"base_model_prefix": "", "__module__": model_class.__module__, "__qualname__": model_class.__qualname__},
    )


def uncut_config(config, encoder):
    """`config` (a loaded backbone's, perhaps cut) with the depth and per-layer settings of `encoder`, the backbone's
    own config: what a DWAtt config records, whatever depth the model runs."""
    full = copy.deepcopy(config)
    for key, values in per_layer_settings(encoder).items():
        setattr(full, key, values)
    full.num_hidden_layers = encoder.num_hidden_layers
    return full


def adopt_masked_lm_head(lm_head: nn.Module, pretrained: PreTrainedModel) -> None:
    """Copy a pretrained masked LM's head (dense, LayerNorm, vocabulary projection and bias) into `lm_head`."""
    prefix = pretrained.base_model_prefix
    source = {key: value for key, value in pretrained.state_dict().items() if not key.startswith(prefix + ".")}

    def find(*suffixes: str) -> torch.Tensor:
        for suffix in suffixes:
            matches = [key for key in source if key == suffix or key.endswith("." + suffix)]
            if len(matches) == 1:
                return source[matches[0]]
        raise ValueError(
            f"cannot find the masked-LM head weight {suffixes[0]!r} of {type(pretrained).__name__}; "
            f"head keys: {sorted(source)}"
        )

    # The families' names for the same three parts: dense, LayerNorm and the vocabulary bias.
    dense = (
        "transform.dense",
        "lm_head.dense",
        "head.dense",
        "vocab_transform",
        "generator_predictions.dense",
        "predictions.dense",
        "dense",
    )
    norm = (
        "transform.LayerNorm",
        "lm_head.layer_norm",
        "lm_head.LayerNorm",
        "head.norm",
        "vocab_layer_norm",
        "generator_predictions.LayerNorm",
        "predictions.LayerNorm",
        "layer_norm",
    )
    decoder_bias = (
        "predictions.bias",
        "lm_head.bias",
        "vocab_projector.bias",
        "generator_lm_head.bias",
        "decoder.bias",
    )
    wanted = set(lm_head.state_dict())
    weights = {"decoder.weight": pretrained.get_output_embeddings().weight}
    for ours, names in (("dense", dense), ("layer_norm", norm)):
        for part in ("weight", "bias"):
            if f"{ours}.{part}" in wanted:
                weights[f"{ours}.{part}"] = find(*(f"{name}.{part}" for name in names))
    if "decoder.bias" in wanted:
        weights["decoder.bias"] = find(*decoder_bias)
    lm_head.load_state_dict({key: value.detach().clone() for key, value in weights.items()})


__all__ = [
    "BACKBONE_IDENTITY",
    "BACKBONE_PREFIX",
    "HUB_KWARGS",
    "PretrainedBackbone",
    "adopt_masked_lm_head",
    "attach_backbone",
    "build_on_backbone",
    "head_only_state_dict",
    "load_checkpoint",
    "load_pretrained_backbone",
    "merged_lora_state_dict",
    "save_checkpoint",
]
