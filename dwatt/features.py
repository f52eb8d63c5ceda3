"""Frozen-backbone feature cache: run the backbone once, train the fusion module and head on its outputs.

In the FE setting the backbone never changes and runs without dropout, so its hidden states are the same every
epoch. `build_feature_cache` computes the layers the fusion reads (all L for DWAtt/Concat/ScalarMix, z_L only
for Base and Base+n) once per sentence and stores them unpadded, token-major, in one tensor — in memory or in a
memory-mapped file when a `path` is given. `FeatureCache` is a `torch.utils.data.Dataset` that `Trainer` reads
like any other, and `FeatureCollator` pads a batch of it for the model's `backbone_hidden_states` input.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset as TorchDataset
from tqdm.auto import tqdm

from .build_record import BuildRecord
from .distributed import launched_processes, split_and_gather, state
from .tokenization import MODEL_INPUTS


def model_inputs(tokens):
    """A tokenised split without its bookkeeping columns (word ids, sentence and window numbers): what the model
    and the padding collator take."""
    return tokens.select_columns([c for c in (*MODEL_INPUTS, "labels") if c in tokens.column_names])


def dataset_fingerprint(dataset, columns: tuple[str, ...] = ("input_ids", "labels")) -> str:
    """A digest of a tokenised dataset's contents (not of its history), equal for equal token ids and labels."""
    digest = hashlib.blake2b(digest_size=16)
    for column in columns:
        if column in dataset.column_names:
            rows = dataset[column]
            digest.update(column.encode())
            rows = [row if isinstance(row, (list, tuple)) else [row] for row in rows]  # a label per sentence
            digest.update(np.asarray([len(row) for row in rows], dtype=np.int64).tobytes())
            digest.update(np.fromiter((v for row in rows for v in row), dtype=np.int64).tobytes())
    return digest.hexdigest()


class FeatureMemo:
    """
    Feature caches kept for the life of a process, so the runs of a sweep that read the same frozen backbone on
    the same sentences (every fusion of a trial, every epoch budget, every trial on the dev split) compute them
    once. A key is `(layers, rest)`: the hidden-state indices a cache holds, and everything else the features depend
    on (backbone and revision, dtype, positions, the dataset's contents). A cache of some layers is taken from a
    remembered one of more layers with the same `rest` (Base's z_L out of DWAtt's all layers) instead of running the
    backbone again. The least recently used caches go first when `max_bytes` would be exceeded.
    """

    def __init__(self, max_bytes: int = 4 << 30):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, FeatureCache] = OrderedDict()
        self.hits = self.misses = 0

    def __contains__(self, key: Hashable) -> bool:
        """Whether `get` returns the cache without building it: remembered, or taken from one of more layers."""
        return key in self._entries or self._superset(key) is not None

    def _superset(self, key: Hashable) -> tuple | None:
        """A remembered cache holding every layer of `key` with the same `rest`, and where those layers sit in it."""
        layers, rest = key
        for (their_layers, their_rest), cache in self._entries.items():
            if their_rest == rest and set(layers) <= set(their_layers):
                return cache, [their_layers.index(layer) for layer in layers]
        return None

    def get(self, key: Hashable, build: Callable[[], FeatureCache]) -> FeatureCache:
        if key in self._entries:
            self.hits += 1
            self._entries.move_to_end(key)
            return self._entries[key]
        superset = self._superset(key)
        if superset is not None:
            self.hits += 1
            cache = superset[0].select_layers(superset[1])
        else:
            self.misses += 1
            cache = build()
        self._entries[key] = cache
        while len(self._entries) > 1 and sum(c.nbytes for c in self._entries.values()) > self.max_bytes:
            self._entries.popitem(last=False)
        return cache

    def memory_bytes(self) -> int:
        """What the remembered caches held in memory take (those memory-mapped from files take none)."""
        return sum(cache.nbytes for cache in self._entries.values() if cache.storage == "memory")

    def clear(self) -> None:
        self._entries.clear()
        self.hits = self.misses = 0


class FeatureCache(TorchDataset):
    """
    Cached hidden states of a tokenised dataset. `features` is `(total_tokens, layers, hidden)`, in memory or
    memory-mapped from a file (`storage`); sentence `i` owns rows `offsets[i] : offsets[i] + lengths[i]`. Items are
    dicts with `backbone_hidden_states`
    `(layers, length, hidden)`, `attention_mask`, and `labels` when the dataset had them.
    """

    def __init__(
        self,
        features: torch.Tensor,
        offsets: list[int],
        lengths: list[int],
        labels: list | None = None,
        storage: str = "memory",
    ):
        self.features, self.offsets, self.lengths, self.labels = features, offsets, lengths, labels
        self.storage = storage  # "memory", or "disk" for a memory-mapped file

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        start, length = self.offsets[index], self.lengths[index]
        item = {
            "backbone_hidden_states": self.features[start : start + length].transpose(0, 1),
            "attention_mask": torch.ones(length, dtype=torch.long),
        }
        if self.labels is not None:
            label = torch.as_tensor(self.labels[index])
            item["labels"] = label if label.is_floating_point() else label.long()
        return item

    @property
    def nbytes(self) -> int:
        return self.features.numel() * self.features.element_size()

    def select_layers(self, positions: list[int]) -> FeatureCache:
        """The same sentences with only the layers at `positions` of this cache's layer axis (a view for a run of
        consecutive layers, such as the last one alone)."""
        if positions == list(range(positions[0], positions[0] + len(positions))):
            features = self.features[:, positions[0] : positions[0] + len(positions)]
        else:
            features = self.features[:, positions]
        return FeatureCache(features, self.offsets, self.lengths, self.labels, self.storage)

    @classmethod
    def from_shares(cls, shares: list[tuple[list[int], FeatureCache]], count: int) -> FeatureCache:
        """One cache of `count` sentences from caches of disjoint shares of them, each given with the sentence
        indices it holds (what `distributed.split_and_gather` returns)."""
        where = {item: (cache, position) for items, cache in shares for position, item in enumerate(items)}
        missing = sorted(set(range(count)) - set(where))
        if missing:
            raise ValueError(f"the shares do not cover sentences {missing[:5]} of {count}")
        pieces, offsets, lengths, labels, start = [], [], [], [], 0
        for item in range(count):
            cache, position = where[item]
            length, first = cache.lengths[position], cache.offsets[position]
            pieces.append(cache.features[first : first + length])
            offsets.append(start)
            lengths.append(length)
            start += length
            if cache.labels is not None:
                labels.append(cache.labels[position])
        has_labels = shares[0][1].labels is not None
        return cls(
            torch.cat(pieces) if pieces else shares[0][1].features, offsets, lengths, labels if has_labels else None
        )


@dataclass
class FeatureCollator:
    """Pads `FeatureCache` items to the longest sentence of the batch and casts features to `dtype`."""

    dtype: torch.dtype = torch.float32

    def __call__(self, items: list[dict]) -> dict[str, torch.Tensor]:
        longest = max(item["attention_mask"].shape[0] for item in items)
        layers, _, hidden = items[0]["backbone_hidden_states"].shape
        batch = len(items)
        states = torch.zeros(batch, layers, longest, hidden, dtype=self.dtype)
        mask = torch.zeros(batch, longest, dtype=torch.long)
        per_token = (
            "labels" in items[0] and items[0]["labels"].dim() == 1 and not items[0]["labels"].is_floating_point()
        )
        labels = torch.full((batch, longest), -100, dtype=torch.long) if per_token else None
        for row, item in enumerate(items):
            length = item["attention_mask"].shape[0]
            states[row, :, :length] = item["backbone_hidden_states"].to(self.dtype)
            mask[row, :length] = 1
            if per_token:
                labels[row, :length] = item["labels"]
        if "labels" in items[0] and not per_token:  # one label (or multi-hot row) per sentence
            labels = torch.stack([item["labels"] for item in items])
        output = {"backbone_hidden_states": states, "attention_mask": mask}
        if labels is not None:
            output["labels"] = labels
        return output


def cache_lengths(dataset, scored_positions_only: bool = False, pooled: str | None = None) -> list[int]:
    """How many positions `build_feature_cache` keeps of each sentence: the labelled ones, one (pooled), or all."""
    if scored_positions_only:
        return [sum(label != -100 for label in row) for row in dataset["labels"]]
    if pooled:
        return [1] * len(dataset)
    return [len(ids) for ids in dataset["input_ids"]]


def cached_layers(model, layers: Sequence[int] | None = None) -> list[int]:
    """The hidden states a feature cache keeps (indices into the backbone's hidden states, 0 = the embedding output):
    `layers`, or those the model's fusion reads."""
    indices = list(layers) if layers is not None else list(model.dwatt.fused_layer_indices)
    depth = model.config.run_depth
    if any(index > depth for index in indices):
        raise ValueError(
            f"cannot cache layers {[index for index in indices if index > depth]}: the model runs its backbone through "
            f"layer {depth} only; build it with backbone_depth={max(indices)} to cache deeper layers"
        )
    return indices


def cache_nbytes(
    model,
    dataset,
    dtype: torch.dtype,
    scored_positions_only: bool = False,
    pooled: str | None = None,
    layers: Sequence[int] | None = None,
) -> int:
    """The size `build_feature_cache` will give the features of `dataset`: positions x cached layers x width."""
    positions = sum(cache_lengths(dataset, scored_positions_only, pooled))
    width = model.dwatt.backbone.config.hidden_size
    return positions * len(cached_layers(model, layers)) * width * torch.empty((), dtype=dtype).element_size()


class CacheTooLargeError(ValueError):
    """A feature cache that fits neither in memory nor on the disk it would spill to, or a model that does not fit the
    memory budget (`--max-memory`) at all."""


MEMORY_SHARE = 0.5  # a cache may take at most this share of the available memory; beyond it, it is memory-mapped
# What a budget keeps beside the weights and the caches: the process's own (torch and the data, about 0.5 GiB) and a
# caching batch's hidden states (0.7 GiB for 64 sentences on a 28-layer, 1536-wide model in bf16), then training's.
WORKING_MARGIN = 2 << 30
RECORD_EVERY_SECONDS = 2.0  # how often a disk cache's build record is written (what a stopped build resumes after)


def model_nbytes(model) -> int:
    """What a model's weights and buffers take in memory (not those offloaded to disk by a `device_map`)."""
    tensors = [t for t in (*model.parameters(), *model.buffers()) if not t.is_meta]
    return sum(t.numel() * t.element_size() for t in {id(t): t for t in tensors}.values())


def cache_storage(
    nbytes: int,
    spill_folder: str | Path,
    max_memory: int | None = None,
    model_bytes: int = 0,
    cached_bytes: int = 0,
    on_disk: bool = False,
) -> Path | None:
    """
    Where caches of `nbytes` go: memory (`None`) when they fit, else memory-mapped files in `spill_folder` when its
    disk has room for them (plus 1 GiB), else `CacheTooLargeError` saying what to change. They fit in memory within
    `MEMORY_SHARE` of the available memory (the rest is the margin for training, the model and the other caches) and,
    with a budget (`max_memory`, bytes, for the whole process), within what the model (`model_bytes`), the caches
    already in memory (`cached_bytes`) and a working margin leave of it; a model that leaves nothing of the budget is
    refused. `on_disk`: to files whatever their size (kept, so that another process, or a stopped build's rerun, reads
    them instead of running the backbone again).
    """
    import shutil

    import psutil

    available = psutil.virtual_memory().available
    allowed = MEMORY_SHARE * available
    if max_memory is not None:
        left = max_memory - model_bytes - WORKING_MARGIN
        if left < 0:
            raise CacheTooLargeError(
                f"--max-memory {gib(max_memory)}: the model alone takes {gib(model_bytes)}, and training needs about "
                f"{gib(WORKING_MARGIN)} beside it; give a budget of at least {gib(model_bytes + WORKING_MARGIN)}, or a "
                "backbone saved in a smaller dtype (bfloat16)"
            )
        allowed = min(allowed, left - cached_bytes)
    if nbytes <= allowed and not on_disk:
        return None
    folder = Path(spill_folder)
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if nbytes + (1 << 30) <= free:
        return folder
    budget = (
        f"the {gib(allowed)} --max-memory leaves"
        if max_memory is not None
        else (f"{MEMORY_SHARE:.0%} of the {gib(available)} of memory available")
    )
    raise CacheTooLargeError(
        f"the feature cache needs {gib(nbytes)}: more than {budget} and more than the {gib(free)} free on the disk "
        f"of {folder}; fuse fewer layers (--layers every:4), score fewer dev sentences (--dev-sentences), or train "
        "without the cache (--no-cache)"
    )


def gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def release_freed_memory() -> None:
    """Hand the memory freed since the last call back to the system, where the C library can (glibc's `malloc_trim`).
    A backbone pass allocates and frees a few large tensors per batch; glibc keeps such freed blocks (up to 32 MiB
    each) in its heap for reuse, where they fragment and add up batch after batch (measured: a 10x larger dev split
    left 300 MB more anonymous memory after caching it to disk). Trimmed after each batch, the process holds what it
    uses, whatever the number of sentences."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        import ctypes
        import ctypes.util

        try:
            _MALLOC_TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM = None


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def anonymous_bytes() -> int | None:
    """The process's resident memory that no file backs (resident less shared pages, `/proc/self/statm`); None where
    the system does not say (not Linux)."""
    try:
        with open("/proc/self/statm") as statm:
            resident, shared = map(int, statm.read().split()[1:3])
    except (OSError, ValueError):
        return None
    return (resident - shared) * _PAGE_SIZE


class FreedMemoryRelease:
    """`release_freed_memory` once the process's anonymous memory has grown by `slack` bytes since the last release:
    a loop of batches that calls `release()` after each stays within `slack` of what it uses, without handing the
    blocks back (and faulting them in again) on every batch, which about doubled a small probe's training and dev
    passes (2.1 to 4.0 s, 3 runs each; within noise of never releasing at a slack of 32 or 64 MiB)."""

    def __init__(self, slack: int = 32 << 20):
        self.slack, self.level = slack, None

    def release(self) -> None:
        now = anonymous_bytes()
        if now is not None and (self.level is None or now > self.level + self.slack):
            release_freed_memory()
            self.level = anonymous_bytes()


def _preallocated(path: Path, nbytes: int) -> None:
    """A fresh file of `nbytes` at `path`, its blocks reserved now where the system can (a disk that cannot hold the
    cache refuses it here, with a message, rather than failing a write into the mapping later, which kills the
    process)."""
    with open(path, "wb") as handle:
        try:
            if nbytes and hasattr(os, "posix_fallocate"):
                os.posix_fallocate(handle.fileno(), 0, nbytes)
            else:
                handle.truncate(nbytes)
        except OSError as error:
            if error.errno in (95, 22):  # EOPNOTSUPP, EINVAL: a file system that reserves nothing ahead
                handle.truncate(nbytes)
                return
            handle.close()
            path.unlink(missing_ok=True)
            raise CacheTooLargeError(
                f"the feature cache {path} needs {gib(nbytes)} on its disk, which cannot hold it ({error.strerror}); "
                "free space there, fuse fewer layers (--layers every:4) or train without the cache (--no-cache)"
            ) from error


def refuse_overflow(features: Sequence[torch.Tensor], dtype: torch.dtype, layers: Sequence[int]) -> None:
    """A float16 cache of features beyond its range (65504) would hold infinities: LLMs' hidden states carry a few
    huge activations, in bf16 as they run. Refused naming the layer (`features`: one tensor a layer of `layers`),
    before anything is trained on them."""
    if dtype != torch.float16:
        return
    peaks = [max(float(layer.amax()), -float(layer.amin())) for layer in features]  # reductions: no copy of a layer
    over = [(layer, peak) for layer, peak in zip(layers, peaks) if peak > torch.finfo(torch.float16).max]
    if over:
        layer, peak = over[0]
        raise ValueError(
            f"--cache-dtype float16: the backbone's hidden states of layer {layer} reach {peak:.3g} (and "
            f"{len(over) - 1} more layers overflow), beyond float16's 65504; cache them as bfloat16 "
            "(--cache-dtype bfloat16) or float32"
        )


def input_device(backbone) -> torch.device:
    """Where `backbone` takes its inputs: its weights' device, or the CPU where they are offloaded (a backbone
    spread by `device_map`, whose accelerate hooks move each layer's inputs and outputs)."""
    weights = next(backbone.parameters()).device
    return torch.device("cpu") if weights.type == "meta" else weights


@torch.no_grad()
def build_feature_cache(
    model,
    dataset,
    batch_size: int = 64,
    dtype: torch.dtype = torch.float16,
    device: torch.device | str | None = None,
    path: str | Path | None = None,
    progress: bool = True,
    bar: tqdm | None = None,
    scored_positions_only: bool = False,
    pooled: str | None = None,
    layers: Sequence[int] | None = None,
    key: dict | None = None,
    share: tuple[int, int] = (0, 1),
    wait: Callable[[], None] = lambda: None,
) -> FeatureCache:
    """
    Run `model`'s backbone once over a tokenised `dataset` (with `input_ids`, `attention_mask`, optional
    `token_type_ids` and `labels`) and keep the layers its fusion reads (or `layers`: indices into the backbone's
    hidden states, 0 the embedding output, as heads on one layer each read them), stored as `dtype` (float16/bfloat16
    halve
    the memory of float32; float32 reproduces the uncached model exactly). With `path`, the features live in a
    memory-mapped file there instead of RAM. With a `path` and a `key` (what the features depend on, as `FEATURE_MEMO`
    keys
    them), the build is recorded beside the file (`BuildRecord`): a stopped build resumes, a finished one is read
    without running the backbone, and one made for another key is built anew. Sentences are batched by length so
    padding costs little; a progress bar says the time left (or `bar`, a bar over a pass of several builds, advances by
    the tokens of each batch in its place).

    `scored_positions_only=True` keeps only the positions that carry a label (first sub-tokens), for evaluation
    with a fusion that works token by token (all but Base+n): its outputs there are the same with or without the
    other positions, and scoring ignores those anyway, so evaluation does about a quarter less work.

    `pooled` is for sequence classification, whose head reads one vector per sentence: `"first"` (`"last"`) keeps
    the first (last) position only (exact for a per-token fusion with that pooling), `"mean"` keeps each layer's mean
    over
    the sentence's tokens, taken in float32 (exact for a fusion linear in the layers -- Base, Concat, ScalarMix --
    with mean pooling: the mean commutes with it). Either way each sentence becomes one row.

    `share=(rank, processes)`, with a `path` and a `key`: one of several processes on one machine (or one shared file
    system) building the one file together, each running the backbone over every `processes`-th batch and writing
    its rows in place; `wait` holds each process until all reach it (a barrier). Every process ends with the whole
    cache, the same file a single process would have written under the same name.
    """
    dwatt = model.dwatt
    backbone = dwatt.backbone
    if scored_positions_only and not dwatt.fusion_is_per_token:
        raise ValueError(f"scored_positions_only needs a per-token fusion; {model.config.fusion!r} mixes positions")
    if scored_positions_only and "labels" not in dataset.column_names:
        raise ValueError("scored_positions_only needs a `labels` column")
    labels = list(dataset["labels"]) if "labels" in dataset.column_names else None
    if pooled not in (None, "first", "last", "mean"):
        raise ValueError(f"pooled: expected 'first', 'last' or 'mean', got {pooled!r}")
    keep = None
    if scored_positions_only:
        keep = [[i for i, label in enumerate(row) if label != -100] for row in labels]
        labels = [[row[i] for i in positions] for row, positions in zip(labels, keep)]
    device = torch.device(device) if device is not None else input_device(backbone)
    was_training = backbone.training
    backbone.eval()
    indices = cached_layers(model, layers)
    input_lengths = [len(ids) for ids in dataset["input_ids"]]
    lengths = cache_lengths(dataset, scored_positions_only, pooled)
    offsets = [0]
    for length in lengths[:-1]:
        offsets.append(offsets[-1] + length)
    total = offsets[-1] + lengths[-1] if lengths else 0
    shape = (total, len(indices), backbone.config.hidden_size)
    order = sorted(range(len(input_lengths)), key=input_lengths.__getitem__)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    rank, processes = share
    if processes > 1 and (path is None or key is None):
        raise ValueError("a cache built by several processes is one keyed file: give its path and key")
    mine = list(range(rank, len(batches), processes))  # the batches this process runs, every processes-th
    record, done = None, 0
    if path is None:
        features = torch.empty(shape, dtype=dtype)
    else:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        numel = shape[0] * shape[1] * shape[2]
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if key is not None:
            holds = {**key, "shape": list(shape), "dtype": str(dtype), "batch_size": batch_size}
            record = BuildRecord(path, json.loads(json.dumps(holds, default=str)), share)
            done = record.batches_done()
        if processes == 1:
            if done == 0:
                _preallocated(path, nbytes)
        else:  # every process has read the record before the first one writes it
            resumable = record.resumable()
            wait()
            if rank == 0 and not resumable:
                _preallocated(path, nbytes)
            if rank == 0 and not record.is_complete():
                record.start(len(batches))
            wait()
            done = done if resumable else 0
        features = torch.from_file(str(path), shared=True, size=numel, dtype=dtype).view(shape)
    columns = [c for c in MODEL_INPUTS if c in dataset.column_names]
    pad_values = {"input_ids": backbone.config.pad_token_id or 0}
    saved_at = time.monotonic()
    if bar is not None:  # what this build's earlier run wrote, or what other processes build, is not this pass's work
        running = set(mine[done:])
        bar.total -= sum(input_lengths[i] for p, batch in enumerate(batches) if p not in running for i in batch)
        bar.refresh()
    for position in tqdm(
        range(done, len(mine)),
        desc="caching backbone features",
        disable=not progress or bar is not None or done == len(mine),
        leave=False,
        total=len(mine),
        initial=done,
        unit="batch",
    ):
        batch_indices = batches[mine[position]]
        rows = dataset.select(batch_indices)
        longest = max(input_lengths[i] for i in batch_indices)
        inputs = {}
        for column in columns:
            tensor = torch.full((len(batch_indices), longest), pad_values.get(column, 0), dtype=torch.long)
            for row, values in enumerate(rows[column]):
                tensor[row, : len(values)] = torch.as_tensor(values)
            inputs[column] = tensor.to(device)
        hidden = dwatt.run_backbone(**inputs)
        # Layer by layer, never all of them stacked: a stacked copy of every layer over a batch of long texts, and its
        # cast, took 1 GiB more on SmolLM2-135M's AG News sweep, to keep one position of each text.
        if pooled == "mean":
            mask = inputs["attention_mask"].unsqueeze(-1).to(torch.float32)
            counts = mask.sum(1, keepdim=True).clamp(min=1)
            reduced = [(hidden[i].float() * mask).sum(1, keepdim=True) / counts for i in indices]
        else:
            reduced = [hidden[i] for i in indices]  # (batch, seq, hidden) each, no copy
        refuse_overflow(reduced, dtype, indices)
        for column, layer in enumerate(reduced):
            layer = layer.to("cpu", dtype)
            for row, index in enumerate(batch_indices):
                start = offsets[index]
                if keep is not None:
                    rows_kept = layer[row, keep[index]]
                elif pooled == "last":
                    rows_kept = layer[row, input_lengths[index] - 1 : input_lengths[index]]
                else:
                    rows_kept = layer[row, : lengths[index]]
                features[start : start + lengths[index], column] = rows_kept
            del layer
        del hidden, reduced
        release_freed_memory()
        if bar is not None:
            bar.update(sum(input_lengths[i] for i in batch_indices))
        if record is not None and (position + 1 == len(mine) or time.monotonic() - saved_at > RECORD_EVERY_SECONDS):
            record.save(position + 1, len(mine))  # the batches written so far sit in the file's pages already
            saved_at = time.monotonic()
    if record is not None and not mine:
        record.save(0, 0)
    if processes > 1:  # every process's rows are in the file once all reach here
        wait()
        if rank == 0:
            record.finish(len(batches))
    backbone.train(was_training)
    return FeatureCache(features, offsets, lengths, labels, storage="memory" if path is None else "disk")


def build_feature_cache_across_processes(model, dataset, **kwargs) -> FeatureCache:
    """`build_feature_cache` with the sentences split across the processes of a data-parallel launch, each on its
    own device, every process ending with the whole cache; plain `build_feature_cache` when run alone. A cache on
    disk (a `path` and `key`) is the one file, written in place by every process (`share`), which a run under
    another number of processes, or alone, reads as it is; one in memory is built in shares and gathered."""
    processes = launched_processes()
    if processes == 1:
        return build_feature_cache(model, dataset, **kwargs)
    if kwargs.get("path") is not None and kwargs.get("key") is not None:
        current = state()
        return build_feature_cache(
            model, dataset, share=(current.process_index, processes), wait=current.wait_for_everyone, **kwargs
        )
    shares = split_and_gather(
        range(len(dataset)), lambda share: build_feature_cache(model, dataset.select(share), **kwargs)
    )
    return FeatureCache.from_shares(shares, len(dataset))
