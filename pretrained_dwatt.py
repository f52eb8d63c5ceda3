# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""Pretrained backbones and head-only checkpoints for DWAtt's task models: `from_backbone` (a pretrained backbone, a
fresh fusion and head), and `save_pretrained(heads_only=True)` / `from_pretrained`, which store everything but the
backbone (like an adapter) and fetch the named backbone again when loading.

Part of DWAtt's remote code: travels with every checkpoint beside `modeling_dwatt.py`; imports only torch and
transformers.
"""

import copy
import difflib
import inspect
from contextlib import contextmanager

import torch
import transformers
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, PretrainedConfig, PreTrainedModel
from transformers.utils import logging

try:
    from .backbones_dwatt import _quiet_loading, backbone_kwargs, per_layer_settings
    from .configuration_dwatt import DWAttConfig
    from .depth_dwatt import cut_config
    from .lora_dwatt import _lora_key, adapted_layers, low_rank_delta
except ImportError:  # a top-level module of the installed project, not remote code
    # Nested, so that the import scan of older transformers (4.46: a regular expression that skips the body of a `try`,
    # not of its `except`) does not take these modules for packages the remote code needs.
    try:
        from backbones_dwatt import _quiet_loading, backbone_kwargs, per_layer_settings
        from configuration_dwatt import DWAttConfig
        from depth_dwatt import cut_config
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


class PretrainedBackboneMixin:
    """What DWAtt's task models add to `PreTrainedModel` for pretrained backbones: building on one
    (`from_backbone`), and saving and loading with or without it (`heads_only`). Mixed in before
    `DWAttPreTrainedModel`; the model holds `self.dwatt` (backbone + fusion)."""

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the fusion and head, which compute the outputs; a backbone kept in bf16 or fp16 (as saved, or
        `backbone_dtype`) hands them its features cast to it. `save_pretrained` records it as the config's `dtype`:
        the checkpoint then loads in it (its backbone too, unless a `dtype` is asked) in every transformers release."""
        backbone = set(map(id, self.dwatt.backbone.parameters()))
        return next(
            (p.dtype for p in self.parameters() if p.is_floating_point() and id(p) not in backbone), super().dtype
        )

    @classmethod
    def from_backbone(
        cls,
        name_or_path: str,
        fusion: str = "dwatt",
        num_labels: int | None = None,
        *,
        revision: str | None = None,
        dtype: torch.dtype | str | None = None,
        backbone_dtype: torch.dtype | str | None = None,
        load_kwargs: dict | None = None,
        **config_kwargs,
    ):
        r"""
        Build a model whose backbone carries the pretrained weights of `name_or_path` (a Hub id such as
        `"roberta-large"` or a local folder) and whose fusion module and head are freshly initialised: the usual
        starting point for training.

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
        pretrained = cls.load_pretrained_backbone(name_or_path, load_kwargs, depth=depth, dtype=backbone_dtype)
        config = DWAttConfig(encoder_config=uncut_config(pretrained.base_model.config, encoder), **settings)
        # Built whole, then cut: the random backbone drawn before the fusion and head is as large as an uncut one's,
        # so that a seed gives them the same weights whatever depth the model runs.
        whole = copy.deepcopy(config)
        whole.backbone_depth = encoder.num_hidden_layers
        model = cls(whole)
        if depth < encoder.num_hidden_layers:
            model.dwatt.cut_backbone(config.backbone_depth)
        else:  # as asked (None: the default, the deepest layer read), not the depth it was built at
            model.config.backbone_depth = config.backbone_depth
        model._attach_pretrained_backbone(pretrained, name_or_path, adopt_head=True)
        if dtype is not None:
            model.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)
        return model

    @classmethod
    def load_pretrained_backbone(
        cls, name_or_path: str, load_kwargs: dict, depth: int | None = None, dtype: torch.dtype | str | None = None
    ) -> PreTrainedModel:
        """The pretrained backbone `name_or_path` as this task model starts from it (the masked-LM model loads its
        head too), with its first `depth` layers only where given (the weights past them are not read), in `dtype`;
        shared-backbone serving (`dwatt.serving.shared_heads`) loads it once for many heads."""
        config = AutoConfig.from_pretrained(name_or_path, **load_kwargs)
        layers, config = config.num_hidden_layers, cut_config(config, depth)
        with _quiet_loading():  # the checkpoint's pooler weights (and layers past `depth`) are unused on purpose
            model = AutoModel.from_pretrained(
                name_or_path,
                config=config,
                **backbone_kwargs(config),
                **({"dtype": dtype} if dtype is not None else {}),
                **load_kwargs,
            )
        model.source_layers = layers  # how deep the pretrained backbone is, whatever depth was loaded
        return model

    def adopt_pretrained_head(self, pretrained: PreTrainedModel) -> None:
        """Hook for heads that start from pretrained weights (the masked-LM head)."""

    def adoptable_head_keys(self) -> set[str]:
        """The `state_dict` keys of the head that `adopt_pretrained_head` fills from the pretrained backbone: what a
        head-only checkpoint may leave out when that part did not train."""
        return set()

    def _attach_pretrained_backbone(self, pretrained: PreTrainedModel, name_or_path: str, adopt_head: bool) -> None:
        """Make a loaded pretrained backbone `self.dwatt.backbone` (in the place of the one this model was built
        with, in its dtype and device), after checking it is the same architecture and
        shape as the one this model was built (or trained) for."""
        ours, theirs = self.config.encoder_config, pretrained.base_model.config
        found = {key: getattr(theirs, key, None) for key in BACKBONE_IDENTITY}
        found["num_hidden_layers"] = getattr(pretrained, "source_layers", found["num_hidden_layers"])  # loaded cut
        differences = [
            f"{key} {found[key]!r} instead of {getattr(ours, key, None)!r}"
            for key in BACKBONE_IDENTITY
            if found[key] != getattr(ours, key, None)
        ]
        if differences:
            raise ValueError(
                f"the backbone {name_or_path!r} is not the one this model was built for: " + "; ".join(differences)
            )
        built, loaded = self.dwatt.backbone, pretrained.base_model
        expected = {key: tuple(value.shape) for key, value in built.state_dict().items()}
        found = {key: tuple(value.shape) for key, value in loaded.state_dict().items()}
        if expected != found:
            missing, unexpected = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
            reshaped = sorted(key for key in set(expected) & set(found) if expected[key] != found[key])
            raise ValueError(
                f"the backbone weights of {name_or_path!r} do not fit the model built from its own config: "
                f"missing {missing[:5]}, unexpected {unexpected[:5]}, other shapes {reshaped[:5]}"
            )
        reference = next(built.parameters())
        if getattr(pretrained, "hf_device_map", None) is None:  # one spread over devices (device_map) stays there
            loaded.to(dtype=reference.dtype, device=None if reference.is_meta else reference.device)
        self.dwatt.use_backbone(loaded.train(built.training))
        if adopt_head:
            self.adopt_pretrained_head(pretrained)

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """
        What a head-only checkpoint stores: everything but the backbone (fusion module, extra layers, task head);
        for masked LM the vocabulary head only if it trains (otherwise it is the backbone's pretrained one); with
        LoRA, the low-rank updates of the adapted backbone layers (`dwatt.lora.updates.<path>.lora_A`/`lora_B`).
        """
        lm_head_trains = any(p.requires_grad for p in getattr(self, "lm_head", nn.Module()).parameters())
        state = {
            key: value for key, value in self.head_state().items() if lm_head_trains or not key.startswith("lm_head.")
        }
        adapted = adapted_layers(self.dwatt.backbone)
        if self.config.lora and not adapted and getattr(self.dwatt, "lora", None) is None:
            raise ValueError(
                "this model's LoRA updates are merged into its backbone: save it whole (heads_only=False)"
            )
        for path, (_, lora_A, lora_B) in adapted.items():
            state[f"dwatt.lora.updates.{_lora_key(path)}.lora_A"] = lora_A
            state[f"dwatt.lora.updates.{_lora_key(path)}.lora_B"] = lora_B
        return state

    def merged_state_dict(self) -> dict[str, torch.Tensor]:
        """The full state of a model whose backbone carries LoRA adapters, with each adapted layer's update merged into
        its weight under the layer's own name, as a plain backbone of its family holds it."""
        adapted = adapted_layers(self.dwatt.backbone)
        scale = self.config.lora["alpha"] / self.config.lora["rank"]
        state = {}
        for key, value in self.state_dict().items():
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

    def save_pretrained(self, save_directory, *args, heads_only: bool = False, **kwargs):
        """
        `PreTrainedModel.save_pretrained`, plus `heads_only=True`: write the config (which names the backbone by
        `backbone_name_or_path` and `backbone_revision`), the remote-code files and only [`head_state_dict`]'s
        tensors, like an adapter. `from_pretrained` on such a folder loads the named backbone (or the one passed as
        `backbone_name_or_path=`) and applies the head. The config written is a copy: the model's own is never
        changed, not even for the length of the save.
        """
        if not heads_only:
            if "state_dict" in kwargs:  # the caller's own tensors (the Trainer's checkpoints, which it resumes from)
                return super().save_pretrained(save_directory, *args, **kwargs)
            if adapted_layers(self.dwatt.backbone):  # LoRA in training: the updates merged into the backbone's layers
                state = self.merged_state_dict()
            elif getattr(self.dwatt, "lora", None) is not None:  # loaded head-only: the backbone holds them already
                state = {k: v for k, v in self.state_dict().items() if not k.startswith("dwatt.lora.")}
            else:
                return super().save_pretrained(save_directory, *args, **kwargs)
            return self._save_with_config(save_directory, *args, state_dict=state, lora_merged=True, **kwargs)
        if not self.config.backbone_name_or_path:
            raise ValueError(
                "heads_only=True needs `config.backbone_name_or_path` (set by `from_backbone`) so that loading can "
                "find the backbone again"
            )
        # The LoRA updates travel beside the head, to be merged into the backbone when it loads.
        return self._save_with_config(
            save_directory, *args, state_dict=self.head_state_dict(), heads_only=True, lora_merged=False, **kwargs
        )

    def _save_with_config(self, save_directory, *args, heads_only: bool = False, lora_merged: bool, **kwargs):
        """`PreTrainedModel.save_pretrained` with a copy of the config that says how the tensors are stored."""
        config = copy.deepcopy(self.config)
        config.heads_only = heads_only
        if config.lora:
            config.lora["merged"] = lora_merged
        own, self.config = self.config, config  # what `save_pretrained` writes; the model's config object is untouched
        try:
            return super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            self.config = own

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """
        Load a full or a head-only checkpoint (see [`save_pretrained`]). For a head-only one the backbone comes from
        `backbone_name_or_path` (a Hub id or folder; default: the one recorded in the config) at
        `backbone_revision`, and must have the recorded architecture and shape. A checkpoint that lacks any weight
        the model needs, holds tensors of other shapes, or whose weights file is corrupted is refused; no
        half-loaded model is returned.
        """
        backbone_name_or_path = kwargs.pop("backbone_name_or_path", None)
        backbone_revision = kwargs.pop("backbone_revision", None)
        output_loading_info = kwargs.pop("output_loading_info", False)
        config = kwargs.pop("config", None)
        if config is None:
            hub_kwargs = {k: kwargs[k] for k in HUB_KWARGS if k in kwargs}
            config = DWAttConfig.from_pretrained(pretrained_model_name_or_path, **hub_kwargs)
        heads_only = bool(getattr(config, "heads_only", False))
        try:
            # the backbone's weights are missing on purpose: no load report
            with _quiet_loading(heads_only), _keys_read_as_stored(cls, heads_only):
                model, info = super().from_pretrained(
                    pretrained_model_name_or_path, *model_args, config=config, output_loading_info=True, **kwargs
                )
        except Exception as error:
            if type(error).__name__ == "SafetensorError":  # safetensors is not imported here: match by name
                raise ValueError(
                    f"{pretrained_model_name_or_path}: the weights file is corrupted or truncated ({error})"
                ) from error
            raise
        missing = sorted(info["missing_keys"])
        if heads_only:
            missing = [key for key in missing if not key.startswith(BACKBONE_PREFIX)]
            lm_head_missing = [key for key in missing if key.startswith("lm_head.")]
            missing = [key for key in missing if not key.startswith("lm_head.")]
        refuse_renamed_keys(missing, info["unexpected_keys"], pretrained_model_name_or_path)
        if missing:
            raise ValueError(
                f"the checkpoint {pretrained_model_name_or_path} lacks {len(missing)} weights the model needs: "
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
            pretrained = cls.load_pretrained_backbone(source, load_kwargs, depth=config.run_depth)
            model._attach_pretrained_backbone(pretrained, source, adopt_head=bool(lm_head_missing))
            if getattr(model.dwatt, "lora", None) is not None:  # W + (alpha / rank) B A: a plain, merged backbone
                model.dwatt.lora.merge_into(model.dwatt.backbone)  # (the pairs kept, for a head-only save again)
                model.config.lora["merged"] = True
            model.config.heads_only = False
            model.config.backbone_name_or_path, model.config.backbone_revision = str(source), revision
        return (model, info) if output_loading_info else model


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


@contextmanager
def _keys_read_as_stored(model_class: type, heads_only: bool):
    """While a head-only checkpoint loads, `model_class` has no base-model prefix, so that transformers reads its keys
    as they are stored: 4.x releases take a file without a `dwatt.` tensor (a Base head's: its classifier only) for
    a base model's weights and refuse it (4.57), or fail on it (4.46, a `NameError` in its loader, which reads the
    class's prefix where 4.57 reads the instance's)."""
    if not heads_only:
        yield
        return
    own = model_class.__dict__.get("base_model_prefix")
    model_class.base_model_prefix = ""
    try:
        yield
    finally:
        if own is None:
            del model_class.base_model_prefix
        else:
            model_class.base_model_prefix = own


def uncut_config(config, encoder):
    """`config` (a loaded backbone's, perhaps cut) with the depth and per-layer settings of `encoder`, the backbone's
    own config: what a DWAtt config records, whatever depth the model runs."""
    full = copy.deepcopy(config)
    for key, values in per_layer_settings(encoder).items():
        setattr(full, key, values)
    full.num_hidden_layers = encoder.num_hidden_layers
    return full


def load_masked_lm(
    name_or_path: str, load_kwargs: dict, depth: int | None = None, dtype: torch.dtype | str | None = None
) -> PreTrainedModel:
    """A pretrained masked LM (backbone and head; its first `depth` layers only where given), in `dtype` where given;
    a backbone without a head is loaded with a warning."""
    config = AutoConfig.from_pretrained(name_or_path, **load_kwargs)
    cut = depth is not None and depth < config.num_hidden_layers
    with _quiet_loading(cut):  # the layers past `depth` are unused on purpose: no load report
        model, info = AutoModelForMaskedLM.from_pretrained(
            name_or_path,
            config=cut_config(config, depth),
            output_loading_info=True,
            **({"dtype": dtype} if dtype is not None else {}),
            **load_kwargs,
        )
    model.source_layers = config.num_hidden_layers
    prefix = model.base_model_prefix
    head_missing = [key for key in info["missing_keys"] if not key.startswith(prefix + ".")]
    if head_missing:
        logger.warning(
            f"{name_or_path} ships no pretrained masked-LM head ({len(head_missing)} weights missing); the head "
            "starts from fresh weights, its vocabulary projection from the input embeddings."
        )
    return model


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
    "PretrainedBackboneMixin",
    "adopt_masked_lm_head",
    "load_masked_lm",
]
