"""The models a sweep's runs start from: built once per backbone, fusion, seed and configuration, and remembered for
the life of a process (`InitialModels`, `INITIAL_MODELS`)."""

from __future__ import annotations

import copy
from collections import OrderedDict

import torch
from transformers import (
    set_seed,
)

from modeling_dwatt import DWAttForTokenClassification
from specs_dwatt import layers_to_run

from ..fingerprints import backbone_fingerprint


class InitialModels:
    """
    `DWAttForTokenClassification.from_backbone` under `set_seed(seed)`, remembered for the life of a
    process. Building a model initialises a random backbone before the pretrained weights overwrite it: several
    seconds for a large backbone, paid again by every run of a sweep, while the runs of one fusion and trial (every
    N, every budget) start from the same weights. The first build of a (backbone, fusion, seed, config) keeps the
    pretrained backbone and the fresh fusion and head weights; later builds copy those into a model made on the
    meta device, so they skip the random initialisation and give the very same model. A local backbone is known by
    its files' contents (`backbone_fingerprint`), so that weights changed in the same folder are loaded anew. The
    fresh fusion and head weights kept are the latest `max_heads` builds' within `max_head_bytes` (the latest one
    always): a Concat or DWAtt head on a 28-layer, 1536-wide LLM takes about 270 MB, and a sweep of two fusions over
    three seeds kept six of them, outside the memory budget. Likewise the backbones kept are the latest used within
    `max_backbone_bytes` (the latest always): a sweep over several backbones, or over heads cut at several depths
    (each depth loads a backbone of its own), would otherwise hold every one of them for the life of the process.
    """

    def __init__(self, max_heads: int = 16, max_head_bytes: int = 512 << 20, max_backbone_bytes: int = 2 << 30):
        self.max_heads, self.max_head_bytes, self.max_backbone_bytes = max_heads, max_head_bytes, max_backbone_bytes
        self._backbones: OrderedDict[tuple, torch.nn.Module] = OrderedDict()
        self._heads: OrderedDict[tuple, tuple] = OrderedDict()
        self.hits = self.misses = 0

    def build(
        self,
        backbone: str,
        fusion: str,
        seed: int,
        model_class=DWAttForTokenClassification,
        cache_layers: list[int] | None = None,
        shares_backbone: bool = False,
        backbone_dtype: str = "auto",
        placement: dict | None = None,
        **config_kwargs,
    ) -> DWAttForTokenClassification:
        """The model of `fusion` on `backbone` initialised with `seed`; `cache_layers`: the layers of the one cache
        the heads of a probe read, whose shared backbone runs as deep as the deepest of them. `shares_backbone` (FE,
        whose backbone never changes): the model takes the remembered backbone itself, not a copy, so that a process
        holds one copy of a 1.5B model's weights however many runs it makes. `backbone_dtype`: the dtype the backbone
        loads in (`RunConfig.backbone_weights_dtype`); `placement`: where it goes (`backbone_placement`)."""
        cls = model_class
        if cache_layers:
            config_kwargs["backbone_depth"] = layers_to_run(cache_layers)
        weights = backbone_fingerprint(backbone)  # a folder whose files changed is another backbone
        placement = dict(placement or {})
        if placement:  # a backbone spread over devices is another one to keep
            weights = (weights, repr(sorted((k, repr(v)) for k, v in placement.items())))
        key = (backbone, weights, backbone_dtype, fusion, seed, cls.__name__, repr(sorted(config_kwargs.items())))
        held = self._heads.get(key)
        if held is not None and (backbone, weights, backbone_dtype, held[0].run_depth) in self._backbones:
            self.hits += 1
            self._heads.move_to_end(key)
            config, head = held
            with torch.device("meta"):
                model = cls(copy.deepcopy(config))
            where = (backbone, weights, backbone_dtype, config.run_depth)
            self._backbones.move_to_end(where)
            kept = self._backbones[where]
            model.dwatt.use_backbone(kept if shares_backbone else copy.deepcopy(kept))
            model.load_state_dict({k: v.clone() for k, v in head.items()}, strict=False, assign=True)
        else:
            self.misses += 1
            set_seed(seed)
            model = cls.from_backbone(
                backbone, fusion=fusion, backbone_dtype=backbone_dtype, load_kwargs=placement, **config_kwargs
            )
            where = (backbone, weights, backbone_dtype, model.config.run_depth)
            if shares_backbone and where in self._backbones:  # the weights just loaded again: the kept ones serve
                model.dwatt.use_backbone(self._backbones[where])
            self._backbones.setdefault(
                where, model.dwatt.backbone if shares_backbone else copy.deepcopy(model.dwatt.backbone)
            )
            self._backbones.move_to_end(where)
            while len(self._backbones) > 1 and self.backbone_bytes() > self.max_backbone_bytes:
                self._backbones.popitem(last=False)
            head = {key: tensor.clone() for key, tensor in model.head_state().items()}
            self._heads[key] = (copy.deepcopy(model.config), head)
            while len(self._heads) > 1 and (
                len(self._heads) > self.max_heads or self.head_bytes() > self.max_head_bytes
            ):
                self._heads.popitem(last=False)
        set_seed(seed)  # the random state after a build does not depend on what the memo held
        return model

    def head_bytes(self) -> int:
        """What the kept fusion and head weights take."""
        return sum(t.numel() * t.element_size() for _, head in self._heads.values() for t in head.values())

    def backbone_bytes(self) -> int:
        """What the kept backbones' weights take (a tensor shared by two of them counted once)."""
        tensors = {id(t): t for b in self._backbones.values() for t in (*b.parameters(), *b.buffers())}
        return sum(t.numel() * t.element_size() for t in tensors.values())

    def clear(self) -> None:
        self._backbones.clear()
        self._heads.clear()
        self.hits = self.misses = 0


INITIAL_MODELS = InitialModels()
