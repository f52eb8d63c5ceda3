# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""How deep a DWAtt model runs its backbone: through the deepest layer its fusion reads (`DWAttConfig.run_depth`), a
head on layer k of L running layers 1..k only. The backbone is built, loaded and saved with those layers
(`cut_config`); where the family puts a final norm after its last layer, a hook on the cut backbone's last layer keeps
that layer's output as the uncut backbone's hidden states hold it, before the norm (`keep_layer_io`, which also keeps
what each layer receives, for Base+n on a decoder).

Part of DWAtt's remote code: travels with every checkpoint beside `modeling_dwatt.py`; imports only torch and
transformers.
"""
import copy
import re

from torch import nn

try:
    from .backbones_dwatt import DecoderFamily, backbone_family, per_layer_settings
except ImportError:  # imported as a top-level module of the installed project rather than as remote code
    from backbones_dwatt import DecoderFamily, backbone_family, per_layer_settings


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


KEPT = "_dwatt_kept"
HOOKS = "_dwatt_hooks"


def _keep_inputs(module, args, kwargs):
    """Forward pre-hook (`keep_layer_io`): the layer's arguments after the hidden states."""
    getattr(module, KEPT)["inputs"] = (args[1:], dict(kwargs))


def _keep_output(module, args, output):
    """Forward hook (`keep_layer_io`): the layer's output hidden states (a layer called several times, as ALBERT's
    shared one is, leaves its last output)."""
    getattr(module, KEPT)["output"] = output[0] if isinstance(output, (tuple, list)) else output


def keep_layer_io(layer: nn.Module, inputs: bool = False, output: bool = False) -> None:
    """Hooks that keep what `layer` receives besides the hidden states (`inputs`) or what it returns (`output`) in a
    store on the layer itself, read with `kept`. The handles torch returns are kept on the layer too, for
    `remove_keepers`: a deep copy of the backbone, or a module the ONNX exporter traced, keeps hooks, handles and store
    together."""
    setattr(layer, KEPT, {})
    handles = getattr(layer, HOOKS, [])
    if inputs:
        handles.append(layer.register_forward_pre_hook(_keep_inputs, with_kwargs=True))
    if output:
        handles.append(layer.register_forward_hook(_keep_output))
    setattr(layer, HOOKS, handles)


def kept(layer: nn.Module, what: str):
    """What `layer`'s hook kept in its last call (`"inputs"` or `"output"`), taken out of its store; None if nothing."""
    store = getattr(layer, KEPT, None)
    return None if store is None else store.pop(what, None)


def remove_keepers(backbone: nn.Module) -> None:
    """Remove the hooks `keep_layer_io` installed on `backbone`'s modules (through their handles), and their stores."""
    for module in backbone.modules():
        for handle in getattr(module, HOOKS, ()):
            handle.remove()
        for name in (HOOKS, KEPT):
            if hasattr(module, name):
                delattr(module, name)


class BackboneDepthMixin:
    """What `DWAttModel` adds for running its backbone only through the layers it reads: the backbone's config at
    that depth, whether it is cut, the hooks on its layers and what they kept, and `cut_backbone` for a model built
    deeper."""

    @property
    def backbone_config(self):
        """The config of the backbone this model holds: the encoder's, cut to `config.run_depth` layers where the
        fusion reads no layer past that."""
        return cut_config(self.config.encoder_config, self.config.run_depth)  # a copy: `cut_backbone` edits it

    @property
    def is_cut(self) -> bool:
        """Whether the backbone runs fewer than all its layers (`config.run_depth` < L)."""
        return self.config.run_depth < self.config.encoder_config.num_hidden_layers

    def uncut_layers_pattern(self) -> str:
        """A regular expression for the state-dict keys of the backbone's layers past `config.run_depth`."""
        return layers_past_pattern(self.backbone, self.config.encoder_config, self.config.run_depth)

    def refuse_unused_layers(self, unexpected_keys, source) -> None:
        """Refuse stored backbone layers past the ones the config runs (`run_depth`, among a checkpoint's
        `unexpected_keys`): a cut checkpoint whose `fused_layers` was edited to a shallower layer would load with the
        head's own layer left unread. A checkpoint saved whole before models were cut holds every layer past the
        cut: unused on purpose, taken."""
        if not self.is_cut:
            return
        past = re.compile(self.uncut_layers_pattern())
        stored = sorted({int(found.group(2)) + 1 for key in unexpected_keys for found in [past.search(key)] if found})
        depth, total = self.config.run_depth, self.config.encoder_config.num_hidden_layers
        if stored and stored != list(range(depth + 1, total + 1)):
            raise ValueError(
                f"{source}: its weights hold backbone layers {depth + 1}-{stored[-1]}, past the {depth} its config runs "
                f"(fused_layers {self.config.fused_layers!r}, backbone_depth {self.config.backbone_depth!r}): the head "
                "read a deeper layer, and those layers would go unused: restore fused_layers to the layer it was "
                "trained on"
            )

    def use_backbone(self, backbone: nn.Module) -> None:
        """Make `backbone` this model's and install what reads its layers on the way. Forward hooks keep what
        `backbone_outputs` needs beyond the hidden states the backbone returns: for a cut backbone, its last layer's
        own output (families with a final norm return that layer normed, where the uncut backbone's hidden states
        hold it as it is); for Base+n on a decoder, what the backbone hands each of its layers after the hidden states
        (masks, rotary embeddings, ...), for the extra layers of the same kind; each kept on the layer itself
        (`keep_layer_io`), so that a deep copy or an exported trace keeps hook and store together. Installed once per
        backbone (when built, and when a pretrained one is attached), so that the forward pass installs nothing and
        stays one graph for `torch.compile`."""
        self.backbone = backbone
        remove_keepers(backbone)  # a backbone attached again, or one another model used
        family = backbone_family(self.config.encoder_config)
        layers = family.layers(backbone)
        if self.is_cut and layers is not None:
            keep_layer_io(layers[-1], output=True)
        self._keeps_layer_inputs = self.fusion.needs_layer_inputs and isinstance(family, DecoderFamily)
        if self._keeps_layer_inputs:
            self._source_layers = family.source_layers(backbone.config, len(self.fusion.layer))
            for layer in layers:
                keep_layer_io(layer, inputs=True)

    def _take_layer_inputs(self) -> list[tuple]:
        """What each of the backbone's layers received in this run besides the hidden states (Base+n on a decoder),
        taken out of the keepers; empty where none keeps them."""
        if not self._keeps_layer_inputs:
            return []
        layers = backbone_family(self.config.encoder_config).layers(self.backbone)
        recorded = [kept(layer, "inputs") for layer in layers]
        return recorded if all(inputs is not None for inputs in recorded) else []

    def _kept(self, what: str, index: int = -1):
        """What the hook on the backbone's layer `index` kept in this run (see `use_backbone`)."""
        layers = backbone_family(self.config.encoder_config).layers(self.backbone)
        return None if layers is None else kept(layers[index], what)

    def cut_backbone(self, depth: int | None = None) -> None:
        """
        Drop the backbone's layers past `depth` (default: the deepest layer the fusion reads), so that it runs
        layers 1..depth only and a checkpoint saved from here on stores only those; `config.backbone_depth` records
        the depth (None where it is the default). The outputs do not change: what the fusion reads is computed the
        same way. A head trained on a model that kept deeper layers (a probe's heads share one backbone) is cut
        this way before it is saved for serving.
        """
        depth = self.config.deepest_read_layer if depth is None else depth
        running = self.backbone.config
        layers = backbone_family(self.config.encoder_config).layers(self.backbone)
        if layers is None:
            raise ValueError(f"cannot cut the {running.model_type!r} backbone: its layers are not where its family says")
        previous, self.config.backbone_depth = self.config.backbone_depth, depth
        try:
            self.config.validate_backbone_depth()
            if depth > running.num_hidden_layers:
                raise ValueError(f"cut_backbone: the backbone holds {running.num_hidden_layers} layers, not {depth}")
        except ValueError:
            self.config.backbone_depth = previous
            raise
        if len(layers) == running.num_hidden_layers:  # one module per layer (ALBERT's layer is shared: kept)
            del layers[depth:]
        cut = cut_config(running, depth)
        for key in (*per_layer_settings(running), "num_hidden_layers"):
            setattr(running, key, getattr(cut, key))  # in place: the backbone's modules hold this config object
        if depth == self.config.deepest_read_layer:
            self.config.backbone_depth = None
        self.use_backbone(self.backbone)


__all__ = ["BackboneDepthMixin", "cut_config", "keep_layer_io", "kept", "layers_past_pattern", "remove_keepers"]
