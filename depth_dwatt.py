# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""How a DWAtt model runs its backbone (`BackboneRunner`): through the deepest layer its fusion reads
(`DWAttConfig.run_depth`), a head on layer k of L running layers 1..k only, the backbone built, loaded and saved with
those layers (`cut_config`); with the hidden states the uncut backbone would give, and what its layers receive
besides them, for a fusion that runs more layers of the backbone's kind (Base+n).

Part of DWAtt's remote code: travels with every checkpoint beside `modeling_dwatt.py`; imports only torch and
transformers.
"""

import copy
import inspect
import re
from functools import partial

import torch
from torch import nn

try:
    from .backbones_dwatt import DecoderFamily, backbone_family, final_norm, per_layer_settings, positions_from_mask
except ImportError:  # a top-level module of the installed project, not remote code
    # Nested, so that the import scan of older transformers (4.46: a regular expression that skips the body of a `try`,
    # not of its `except`) does not take these modules for packages the remote code needs.
    try:
        from backbones_dwatt import DecoderFamily, backbone_family, final_norm, per_layer_settings, positions_from_mask
    except ImportError as error:
        raise ImportError(f"{__name__} needs the other *_dwatt.py files beside it") from error


def cut_config(config, depth: int | None):
    """A copy of a backbone config with its first `depth` layers only (its per-layer settings cut alike): the
    backbone that runs layers 1..depth and holds no weight past them. All its layers where `depth` is None or not
    fewer: the copy is the config as it is."""
    cut = copy.deepcopy(config)  # with its private settings (the attention implementation) kept
    if depth is None or depth >= config.num_hidden_layers:
        return cut
    for key, values in per_layer_settings(config).items():
        setattr(cut, key, values[:depth])
    cut.num_hidden_layers = depth
    return cut


def layers_past_pattern(backbone: nn.Module, encoder_config, depth: int) -> str:
    """A regular expression for the state-dict keys (`backbone.` and after) of the layers past `depth` of a
    backbone built from `encoder_config` (of which `backbone` may hold fewer)."""
    layers = backbone_family(encoder_config).layers(backbone)
    path = next((name for name, module in backbone.named_modules() if module is layers), None)
    past = "|".join(str(index) for index in range(depth, encoder_config.num_hidden_layers))
    return rf"(^|\.)backbone\.{re.escape(path)}\.({past})\." if path and past else r"$^"


RUNNER = "_dwatt_runner"


class _EndOfDryRun(Exception):
    """Raised in a dry run (`BackboneRunner.layer_inputs`) once the last layer whose inputs are wanted has them."""


def _hidden_states_through(hidden_states, *args, **kwargs):
    """A layer's `forward` during a dry run: the hidden states handed on, the layer's work skipped."""
    return hidden_states


class BackboneRunner:
    """
    Runs one backbone for the DWAtt models that read it, and owns what that takes beyond calling it: the cut (a
    backbone built or loaded with its first k layers only, `cut`), the hooks on its layers (with the handles torch
    returns) and what they keep in a run.

    - `run` returns the hidden states as the uncut backbone's would hold them: where the family puts a final norm after
      its last layer (ModernBERT, the decoder LLMs), a cut backbone's last hidden state is that layer's own output,
      kept by a forward hook, not the normed one the cut backbone returns.
    - `layer_inputs` gives what the backbone hands its layers besides the hidden states (masks, rotary embeddings,
      relative positions), for a fusion that runs more layers of the backbone's own kind on top (Base+n). Encoders'
      families compute them (`BackboneFamily.layer_inputs`). A decoder's are recorded one way, by forward pre-hooks on
      its layers: in the run itself where the model ran the backbone (`keep_layer_inputs`), else in a dry run over
      cached hidden states, whose layers hand the hidden states on without their work.

    One runner per backbone, kept on the backbone itself (`of`): every model that reads a backbone (heads served
    together share one) finds the same runner, and a deep copy of the backbone carries its runner, hooks and store
    along, consistent with each other.
    """

    def __init__(self, backbone: nn.Module, encoder_config):
        self.backbone, self.total_layers = backbone, encoder_config.num_hidden_layers
        self.family = backbone_family(encoder_config)
        accepted = inspect.signature(backbone.forward).parameters
        self.takes_token_types = "token_type_ids" in accepted
        self.takes_use_cache = "use_cache" in accepted  # a decoder's key/value cache: never read here
        self.takes_position_ids = "position_ids" in accepted
        self.records_layer_inputs = False
        self._handles: list = []
        self._last_output = None
        self._inputs: dict[int, tuple[tuple, dict]] = {}
        self._stop_after: int | None = None
        setattr(backbone, RUNNER, self)
        self._attach()

    @classmethod
    def of(cls, backbone: nn.Module, encoder_config) -> "BackboneRunner":
        """The runner of `backbone` (made on first use); `encoder_config`: the uncut backbone's config."""
        runner = getattr(backbone, RUNNER, None)
        if runner is None or runner.backbone is not backbone:
            runner = cls(backbone, encoder_config)
        return runner

    @property
    def layers(self) -> nn.ModuleList | None:
        return self.family.layers(self.backbone)

    @property
    def depth(self) -> int:
        """How many layers the backbone runs."""
        return self.backbone.config.num_hidden_layers

    @property
    def is_cut(self) -> bool:
        return self.depth < self.total_layers

    def keep_layer_inputs(self) -> None:
        """Record, in every run from now on, what a decoder's layers receive besides the hidden states (an encoder's
        family computes them instead)."""
        if isinstance(self.family, DecoderFamily) and not self.records_layer_inputs:
            self.records_layer_inputs = True
            self._attach()

    def _attach(self) -> None:
        self.detach()
        layers = self.layers
        if layers is None:
            return
        if self.is_cut:
            self._handles.append(layers[-1].register_forward_hook(self._keep_output))
        if self.records_layer_inputs:
            self._handles += self._input_recorders(layers)

    def _input_recorders(self, layers: nn.ModuleList) -> list:
        """Forward pre-hooks that record what each of `layers` receives (`_keep_inputs`); their handles."""
        return [
            layer.register_forward_pre_hook(partial(self._keep_inputs, index), with_kwargs=True)
            for index, layer in enumerate(layers)
        ]

    def _backbone_inputs(self, inputs: dict) -> dict:
        """`inputs` as this backbone takes them: without token types where it has none, without a key/value cache,
        positions counted from each row's first non-padding token for a decoder, and no None values."""
        if not self.takes_token_types:
            inputs.pop("token_type_ids", None)
        mask = inputs.get("attention_mask")
        if self.family.causal and self.takes_position_ids and mask is not None and inputs.get("position_ids") is None:
            inputs["position_ids"] = positions_from_mask(mask)
        if self.takes_use_cache:
            inputs["use_cache"] = False
        return {key: value for key, value in inputs.items() if value is not None}

    def detach(self) -> None:
        """Remove this runner's hooks from the backbone (through their handles)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _keep_output(self, module, args, output) -> None:
        # A layer called several times (ALBERT's shared one) leaves its last output.
        self._last_output = output[0] if isinstance(output, (tuple, list)) else output

    def _keep_inputs(self, index: int, module, args, kwargs) -> None:
        if args:
            self._inputs[index] = (args[1:], dict(kwargs))
        else:  # the hidden states by name
            self._inputs[index] = ((), {k: v for k, v in kwargs.items() if k != "hidden_states"})
        if index == self._stop_after:
            raise _EndOfDryRun

    def run(
        self, output_attentions: bool = False, through_final_norm: bool = False, **inputs
    ) -> tuple[tuple[torch.Tensor, ...], tuple | None]:
        """
        The backbone's hidden states for `inputs` (embedding output first, then each layer it runs), and its
        attention maps when `output_attentions` (else None). Inputs the family has no use for (token types) are left
        out. A decoder-only backbone counts positions from each row's first non-padding token, so that padding on
        either side changes nothing (transformers' own default counts from the first position, padding included).
        `through_final_norm`: every hidden state through the norm the backbone applies after its last layer (the
        uncut backbone's last one is returned normed already), as the family's task classes read the last one.
        """
        if output_attentions:
            inputs["output_attentions"] = True
        self._inputs, self._last_output = {}, None
        outputs = self.backbone(**self._backbone_inputs(inputs), output_hidden_states=True, return_dict=True)
        last, self._last_output = self._last_output, None
        if last is None or not self.is_cut:
            last = outputs.last_hidden_state
        attentions = outputs.attentions if output_attentions else None
        states = (*outputs.hidden_states[:-1], last)
        if through_final_norm:
            norm = final_norm(self.backbone)
            states = (*(norm(state) for state in states[:-1]), norm(last) if self.is_cut else last)
        return states, attentions

    def layer_inputs(
        self,
        layers: nn.ModuleList,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        from_this_run: bool = False,
    ) -> list[tuple[tuple, dict]]:
        """
        The positional and keyword arguments after the hidden states for `layers`, of the backbone's kind, run on
        top of its last (`hidden_states`: that layer's output). A decoder's extra layer at position L + i gets what
        the backbone handed its last layer of the same kind (`DecoderFamily.source_layers`): recorded in the run
        just made where `from_this_run`, else in a dry run.
        """
        if not isinstance(self.family, DecoderFamily):
            return self.family.layer_inputs(self.backbone, hidden_states, attention_mask, layers)
        sources = self.family.source_layers(self.backbone.config, len(layers))
        recorded, self._inputs = self._inputs, {}
        if not (from_this_run and all(j in recorded for j in sources)):
            recorded = self._dry_run(hidden_states, attention_mask, max(sources))
        return [recorded[j] for j in sources]

    def _dry_run(self, hidden_states, attention_mask, last_wanted: int) -> dict[int, tuple[tuple, dict]]:
        """What the backbone hands layers 0..`last_wanted`, recorded by the pre-hooks, in a run from `hidden_states`
        as input embeddings whose layers do no work (and that stops at `last_wanted`)."""
        layers = self.layers
        temporary = [] if self.records_layer_inputs else self._input_recorders(layers)
        inputs = self._backbone_inputs({"inputs_embeds": hidden_states, "attention_mask": attention_mask})
        for layer in layers:
            layer.forward = _hidden_states_through
        self._stop_after, self._inputs = last_wanted, {}
        try:
            self.backbone(**inputs)
        except _EndOfDryRun:
            pass
        finally:
            self._stop_after = None
            for layer in layers:
                del layer.forward  # the class's own again
            for handle in temporary:
                handle.remove()
        recorded, self._inputs = self._inputs, {}
        return recorded

    def cut(self, depth: int) -> None:
        """Drop the backbone's layers past `depth`, so that it runs layers 1..depth only and holds no weight past
        them; its config (the object its modules hold) says so."""
        running = self.backbone.config
        layers = self.layers
        if layers is None:
            raise ValueError(
                f"cannot cut the {running.model_type!r} backbone: its layers are not where its family says"
            )
        if depth > running.num_hidden_layers:
            raise ValueError(f"cut_backbone: the backbone holds {running.num_hidden_layers} layers, not {depth}")
        if len(layers) == running.num_hidden_layers:  # one module per layer (ALBERT's layer is shared: kept)
            del layers[depth:]
        cut = cut_config(running, depth)
        for key in (*per_layer_settings(running), "num_hidden_layers"):
            setattr(running, key, getattr(cut, key))  # in place: the backbone's modules hold this config object
        self._attach()


def refuse_unused_layers(config, backbone: nn.Module, unexpected_keys, source) -> None:
    """Refuse stored backbone layers past the ones `config` runs (`run_depth`, among a checkpoint's
    `unexpected_keys`): a cut checkpoint whose `fused_layers` was edited to a shallower layer would load with the
    head's own layer left unread. A checkpoint saved whole before models were cut holds every layer past the cut:
    unused on purpose, taken."""
    depth, total = config.run_depth, config.encoder_config.num_hidden_layers
    if depth >= total:
        return
    past = re.compile(layers_past_pattern(backbone, config.encoder_config, depth))
    stored = sorted({int(found.group(2)) + 1 for key in unexpected_keys for found in [past.search(key)] if found})
    if stored and stored != list(range(depth + 1, total + 1)):
        raise ValueError(
            f"{source}: its weights hold backbone layers {depth + 1}-{stored[-1]}, past the {depth} its config runs "
            f"(fused_layers {config.fused_layers!r}, backbone_depth {config.backbone_depth!r}): the head read a "
            "deeper layer, and those layers would go unused: restore fused_layers to the layer it was trained on"
        )


__all__ = ["BackboneRunner", "cut_config", "layers_past_pattern", "refuse_unused_layers"]
