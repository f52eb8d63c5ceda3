"""Running the frozen backbone once over a tokenised split into a `FeatureCache`: batched by length, the layers asked
for, pooled or at the scored positions only, in memory or into a memory-mapped file whose build a stopped run resumes
(`BuildRecord`), alone or shared by the processes of a data-parallel launch."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..build_record import BuildRecord
from ..distributed import launched_processes, split_and_gather, state
from ..tokenization import model_input_names
from .cache import FeatureCache, cache_lengths, cached_layers
from .memory import preallocated, release_freed_memory

RECORD_EVERY_SECONDS = 2.0  # how often a disk cache's build record is written (what a stopped build resumes after)


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
    labels, keep = _kept_positions(model, dataset, scored_positions_only, pooled)
    device = torch.device(device) if device is not None else input_device(backbone)
    was_training = backbone.training
    backbone.eval()
    indices = cached_layers(model, layers)
    layout = CacheLayout.of(dataset, scored_positions_only, pooled, batch_size)
    shape = (layout.rows, len(indices), backbone.config.hidden_size)
    rank, processes = share
    if processes > 1 and (path is None or key is None):
        raise ValueError("a cache built by several processes is one keyed file: give its path and key")
    mine = list(range(rank, len(layout.batches), processes))  # the batches this process runs, every processes-th
    if path is None:
        features, record, done = torch.empty(shape, dtype=dtype), None, 0
    else:
        features, record, done = _file_storage(Path(path), shape, dtype, key, batch_size, share, layout, wait)
    columns = [c for c in model_input_names(model.config.word_readout) if c in dataset.column_names]
    pad_values = {"input_ids": backbone.config.pad_token_id or 0, "word_ids": -1}
    saved_at = time.monotonic()
    if bar is not None:  # what this build's earlier run wrote, or what other processes build, is not this pass's work
        running = set(mine[done:])
        bar.total -= sum(layout.tokens(batch) for p, batch in enumerate(layout.batches) if p not in running)
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
        batch_indices = layout.batches[mine[position]]
        inputs = _padded_inputs(dataset, batch_indices, columns, pad_values, layout, device)
        hidden = dwatt.run_backbone(**inputs, read=indices)  # words read in the kept layers alone
        reduced = _reduced_layers(hidden, indices, pooled, inputs["attention_mask"])
        refuse_overflow(reduced, dtype, indices)
        _write_rows(features, reduced, batch_indices, layout, keep, pooled, dtype)
        del reduced
        release_freed_memory()
        if bar is not None:
            bar.update(layout.tokens(batch_indices))
        if record is not None and (position + 1 == len(mine) or time.monotonic() - saved_at > RECORD_EVERY_SECONDS):
            record.save(position + 1, len(mine))  # the batches written so far sit in the file's pages already
            saved_at = time.monotonic()
    if record is not None and not mine:
        record.save(0, 0)
    if processes > 1:  # every process's rows are in the file once all reach here
        wait()
        if rank == 0:
            record.finish(len(layout.batches))
    backbone.train(was_training)
    return FeatureCache(features, layout.offsets, layout.lengths, labels, storage="memory" if path is None else "disk")


def _kept_positions(model, dataset, scored_positions_only: bool, pooled: str | None):
    """The labels a cache keeps beside its features, and the positions it keeps of each row where only the scored
    ones are kept (else None); refused: what the model or the data cannot give."""
    if scored_positions_only and not model.dwatt.fusion_is_per_token:
        raise ValueError(f"scored_positions_only needs a per-token fusion; {model.config.fusion!r} mixes positions")
    if scored_positions_only and "labels" not in dataset.column_names:
        raise ValueError("scored_positions_only needs a `labels` column")
    labels = list(dataset["labels"]) if "labels" in dataset.column_names else None
    if pooled not in (None, "first", "last", "mean"):
        raise ValueError(f"pooled: expected 'first', 'last' or 'mean', got {pooled!r}")
    if not scored_positions_only:
        return labels, None
    keep = [[i for i, label in enumerate(row) if label != -100] for row in labels]
    return [[row[i] for i in positions] for row, positions in zip(labels, keep)], keep


@dataclass(frozen=True)
class CacheLayout:
    """Where each sentence's rows sit in a cache (`offsets`, `lengths`: rows kept of each), its tokens as the backbone
    reads them (`input_lengths`), and the batches it runs: sentences sorted by length, so padding costs little."""

    input_lengths: list[int]
    lengths: list[int]
    offsets: list[int]
    batches: list[list[int]]

    @classmethod
    def of(cls, dataset, scored_positions_only: bool, pooled: str | None, batch_size: int) -> CacheLayout:
        input_lengths = [len(ids) for ids in dataset["input_ids"]]
        lengths = cache_lengths(dataset, scored_positions_only, pooled)
        offsets = [0]
        for length in lengths[:-1]:
            offsets.append(offsets[-1] + length)
        order = sorted(range(len(input_lengths)), key=input_lengths.__getitem__)
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        return cls(input_lengths, lengths, offsets, batches)

    @property
    def rows(self) -> int:
        return self.offsets[-1] + self.lengths[-1] if self.lengths else 0

    def tokens(self, batch: list[int]) -> int:
        return sum(self.input_lengths[i] for i in batch)


def _file_storage(path: Path, shape, dtype, key, batch_size: int, share, layout: CacheLayout, wait):
    """A cache's memory-mapped file at `path`, made or resumed (its `BuildRecord` where there is a `key`): the
    features tensor on it, the record, and the batches of this process written already."""
    rank, processes = share
    path.parent.mkdir(parents=True, exist_ok=True)
    numel = shape[0] * shape[1] * shape[2]
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    record, done = None, 0
    if key is not None:
        holds = {**key, "shape": list(shape), "dtype": str(dtype), "batch_size": batch_size}
        record = BuildRecord(path, json.loads(json.dumps(holds, default=str)), share)
        done = record.batches_done()
    if processes == 1:
        if done == 0:
            preallocated(path, nbytes)
    else:  # every process has read the record before the first one writes it
        resumable = record.resumable()
        wait()
        if rank == 0 and not resumable:
            preallocated(path, nbytes)
        if rank == 0 and not record.is_complete():
            record.start(len(layout.batches))
        wait()
        done = done if resumable else 0
    return torch.from_file(str(path), shared=True, size=numel, dtype=dtype).view(shape), record, done


def _padded_inputs(dataset, batch_indices, columns, pad_values, layout: CacheLayout, device) -> dict:
    """The backbone's inputs for a batch of sentences, padded to its longest."""
    rows = dataset.select(batch_indices)
    longest = max(layout.input_lengths[i] for i in batch_indices)
    inputs = {}
    for column in columns:
        tensor = torch.full((len(batch_indices), longest), pad_values.get(column, 0), dtype=torch.long)
        for row, values in enumerate(rows[column]):
            tensor[row, : len(values)] = torch.as_tensor(values)
        inputs[column] = tensor.to(device)
    return inputs


def _reduced_layers(hidden, indices, pooled: str | None, attention_mask) -> list[torch.Tensor]:
    """The cached layers of a batch's hidden states, each `(batch, seq, hidden)` as it is (no copy), or its mean over
    each sentence's tokens in float32 (`pooled="mean"`). Layer by layer, never all of them stacked: a stacked copy of
    every layer over a batch of long texts, and its cast, would take a copy of every layer to keep one position."""
    if pooled != "mean":
        return [hidden[i] for i in indices]
    mask = attention_mask.unsqueeze(-1).to(torch.float32)
    counts = mask.sum(1, keepdim=True).clamp(min=1)
    return [(hidden[i].float() * mask).sum(1, keepdim=True) / counts for i in indices]


def _write_rows(features, reduced, batch_indices, layout: CacheLayout, keep, pooled: str | None, dtype) -> None:
    """Each sentence's kept rows of each layer, in its place in the cache."""
    for column, layer in enumerate(reduced):
        layer = layer.to("cpu", dtype)
        for row, index in enumerate(batch_indices):
            start, length = layout.offsets[index], layout.lengths[index]
            if keep is not None:
                rows_kept = layer[row, keep[index]]
            elif pooled == "last":
                rows_kept = layer[row, layout.input_lengths[index] - 1 : layout.input_lengths[index]]
            else:
                rows_kept = layer[row, :length]
            features[start : start + length, column] = rows_kept
        del layer


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
