"""A run's feature caches (FE): keyed by what they depend on (`feature_key`), remembered across the runs of a process
(`FEATURE_MEMO`), built once with their size, tokens and a bar for the backbone pass said first (`feature_caches`),
and what results.json says of them (`cache_facts`)."""

from __future__ import annotations

import hashlib
import json
import sys

import torch
from tqdm.auto import tqdm

from ..distributed import as_the_main_process_says, is_main_process
from ..features.build import build_feature_cache_across_processes, input_device
from ..features.cache import cache_nbytes, cached_layers, dataset_fingerprint
from ..features.memo import FeatureMemo
from ..features.memory import cache_storage, gib, model_nbytes
from ..fingerprints import backbone_fingerprint
from ..run_config import RunConfig
from .placement import feature_cache_folder, place_on_device

# Frozen-backbone features shared by the runs of one process (a sweep): see `FeatureMemo`.
FEATURE_MEMO = FeatureMemo()


def feature_caches(
    model, backbone: str, config: RunConfig, *splits: tuple[object, dict], layers: list[int] | None = None
) -> list:
    """
    FE: the backbone's features of each `(tokenised split, build_feature_cache options)`, computed on this process's
    device and remembered across the runs of the process (`FEATURE_MEMO`), in `config.cache_dtype`: of the layers the
    model's fusion reads, or of `layers` (hidden-state indices; heads on one layer each read one cache of them all).
    Before computing them it states their size and the tokens the backbone runs over, then shows one bar for the
    whole pass with the time left (on the main process, unless `config.backbone_progress` is off): in memory when
    they fit (`features.cache_storage`: within `config.max_memory` beside the model, and half the available memory),
    else memory-mapped from files in `feature_cache_folder`, named by their key, resumed where a stopped build left
    them and read again by later runs; else a one-line error saying what to change. Each cache records where it lives
    (`storage`).
    """
    place_on_device(model)
    dtype = getattr(torch, config.cache_dtype)
    shown = config.progress if config.backbone_progress is None else config.backbone_progress
    progress = shown and is_main_process()
    if layers is not None:
        splits = tuple((tokens, {**options, "layers": list(layers)}) for tokens, options in splits)
    keys = [feature_key(model, backbone, tokens, dtype, **options) for tokens, options in splits]
    new = [(tokens, options) for (tokens, options), key in zip(splits, keys) if key not in FEATURE_MEMO]
    nbytes = sum(cache_nbytes(model, tokens, dtype, **options) for tokens, options in new)
    folder = feature_cache_folder(config)
    spill = (
        cache_storage(
            nbytes, folder, config.max_memory, model_nbytes(model), FEATURE_MEMO.memory_bytes(), config.cache_on_disk
        )
        if new
        else None
    )
    spill = as_the_main_process_says(spill)  # the processes of a launch build each cache the same way, together
    tokens_run = sum(len(ids) for tokens, _ in new for ids in tokens["input_ids"])
    if new and progress:
        count, width = len(cached_layers(model, layers)), model.dwatt.backbone.config.hidden_size
        where = (
            "in memory" if spill is None else f"memory-mapped from files under {spill} (kept, named by their contents)"
        )
        tqdm.write(  # above the bars a sweep or a probe shows
            f"feature cache: {gib(nbytes)} ({count} layers x {width}, {config.cache_dtype}), {where}; the backbone "
            f"runs {model.config.run_depth} layers over {tokens_run:,} tokens of {len(new)} split(s)",
            file=sys.stderr,
        )
    with tqdm(
        total=tokens_run,
        desc="backbone pass",
        unit="tok",
        unit_scale=True,
        leave=False,
        disable=not (new and progress),
    ) as bar:  # closed however the pass ends: an error prints on a line of its own
        caches = []
        for (tokens, options), key in zip(splits, keys):
            if spill is None:
                on_disk = {}
            else:  # one file named by its contents, which the processes of a launch write together
                described = described_key(key)
                on_disk = {"path": spill / f"{key_digest(described)}.bin", "key": described}
            caches.append(
                FEATURE_MEMO.get(
                    key,
                    lambda tokens=tokens, options=options, on_disk=on_disk: build_feature_cache_across_processes(
                        model, tokens, dtype=dtype, bar=bar, **options, **on_disk
                    ),
                )
            )
    return caches


def described_key(key) -> dict:
    """A `feature_key` as named fields, as a disk cache's record states them."""
    layers, (backbone, fingerprint, revision, dtype, scored_positions_only, pooled, where, runs_in, data, *read) = key
    readout = [part.removeprefix("word_readout=") for part in read if part.startswith("word_readout=")]
    return (
        ({"through_final_norm": True} if "through_final_norm" in read else {})
        | ({"word_readout": readout[0]} if readout else {})
    ) | {
        "layers": list(layers),
        "backbone": backbone,
        "backbone_fingerprint": fingerprint,
        "revision": revision,
        "dtype": dtype,
        "scored_positions_only": scored_positions_only,
        "pooled": pooled,
        "device": where,
        "backbone_dtype": runs_in,
        "data_fingerprint": data,
    }


def key_digest(described: dict) -> str:
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:32]


def feature_key(
    model,
    backbone: str,
    tokens,
    dtype,
    scored_positions_only: bool = False,
    pooled: str | None = None,
    layers: list[int] | None = None,
):
    """What a feature cache depends on, as `FEATURE_MEMO` keys it: the layers, and the rest (the backbone, its
    revision and weights by content, dtype and positions kept, the kind of device (each process of a launch on its
    own GPU computes the same features) and dtype the backbone runs in, and the
    sentences' contents). Runs whose
    keys are equal share one cache; a run whose layers are a subset of a remembered cache's, with the rest equal, takes
    them from it."""
    weights = next(model.dwatt.backbone.parameters())
    rest = (
        backbone,
        backbone_fingerprint(backbone),
        model.config.backbone_revision,
        str(dtype),
        scored_positions_only,
        pooled,
        input_device(model.dwatt.backbone).type,
        str(weights.dtype),
        dataset_fingerprint(tokens),
    )
    # Other features; a key without them stays as caches made before they existed.
    if model.config.through_final_norm:
        rest += ("through_final_norm",)
    if model.config.word_readout != "first":
        rest += (f"word_readout={model.config.word_readout}",)
    return tuple(cached_layers(model, layers)), rest


def cache_facts(*caches) -> dict:
    """What results.json says of a run's feature caches: their size and where they lived."""
    return {
        "cache_bytes": sum(cache.nbytes for cache in caches),
        "cache_storage": "disk" if any(cache.storage == "disk" for cache in caches) else "memory",
    }


__all__ = ["FEATURE_MEMO", "cache_facts", "described_key", "feature_caches", "feature_key", "key_digest"]
