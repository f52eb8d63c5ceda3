"""Layers ranked before any label: one backbone pass over a bounded sample of a data set's texts (labels ignored),
then every label-free measure of `dwatt.layer_measures` on each layer (`rank_layers`, `dwatt rank-layers`).

The layers are the probe's (hidden state 0, the embedding output, then 1..L, read as the DWAtt model reads them, the
final norm included where the probe includes it), and a text's tokens are its own: special tokens and padding are
left out. Per text, only what the measures need is kept (two numbers and one pooled vector per layer), so the memory
is the model's, one batch's states and texts x layers x hidden pooled values.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from modeling_dwatt import DWAttForTokenClassification

from .data.classification import MAX_TOKENS, load_classification_dataset, read_unlabelled_texts
from .data.ner import load_ner_dataset
from .features.memory import gib, model_nbytes
from .layer_measures import MEASURES, LayerMeasures
from .portable import backbone_folder, backbone_label
from .tasks import Kind, task_named
from .tokenization import as_in_running_text, load_tokenizer

try:
    import resource
except ImportError:  # Windows has no getrusage
    resource = None


def _sentences(task_name: str, dataset: str | None, data_dir: str | None, columns: dict) -> list:
    """The training split's sentences, each a list of words (labels ignored)."""
    name = task_named(task_name).dataset_for(dataset, data_dir)
    return list(load_ner_dataset(name, data_dir)["train"]["tokens"])


def _texts(task_name: str, dataset: str | None, data_dir: str | None, columns: dict) -> list:
    """The training split's texts, or (text, pair) tuples (labels ignored; a folder's file need have none)."""
    if data_dir is not None:
        return read_unlabelled_texts(data_dir, columns.get("text_column"), columns.get("pair_column"))
    name = task_named(task_name).dataset_for(dataset, data_dir)
    train = load_classification_dataset(name, data_dir, **columns)["train"]
    if "text_pair" in train.column_names:
        return list(zip(train["text"], train["text_pair"]))
    return list(train["text"])


# Where a task's unlabelled texts come from, by its kind (a masked LM has no layer to choose for a head).
TEXTS_OF_KIND: dict[Kind, Callable[..., list]] = {"tagging": _sentences, "classification": _texts}


def _encode(tokenizer, texts: list, max_length: int) -> dict:
    """The tokenizer's batch of `texts` (word lists as in running text, texts, or pairs) with its special-token mask."""
    settings = dict(truncation=True, max_length=max_length, return_special_tokens_mask=True, padding=True)
    if isinstance(texts[0], list):
        return tokenizer(
            as_in_running_text(tokenizer, texts), is_split_into_words=True, **settings, return_tensors="pt"
        )
    if isinstance(texts[0], tuple):
        firsts, pairs = (list(part) for part in zip(*texts))
        return tokenizer(firsts, pairs, **settings, return_tensors="pt")
    return tokenizer(texts, **settings, return_tensors="pt")


@dataclass
class LayerRanking:
    """What `rank_layers` found: each measure's value by layer, each measure's pick, and what the pass took."""

    backbone: str  # as results name it (`backbone_label`)
    dataset: str
    texts: int
    tokens: int
    seconds: float  # the backbone pass and the measures together
    peak_memory_bytes: int | None
    values: dict[str, dict[int, float]] = field(default_factory=dict)  # measure -> layer -> value

    @property
    def layers(self) -> list[int]:
        return sorted(next(iter(self.values.values()))) if self.values else []

    def picks(self) -> dict[str, int | None]:
        """Each measure's layer among 1..L (the embedding output is shown, never picked: the probe's baseline)."""
        return {
            name: MEASURES[name].pick({layer: value for layer, value in by_layer.items() if layer > 0})
            for name, by_layer in self.values.items()
        }

    def as_json(self) -> dict:
        return {
            "backbone": self.backbone,
            "dataset": self.dataset,
            "texts": self.texts,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 1),
            "peak_memory_bytes": self.peak_memory_bytes,
            "measures": {
                name: {str(layer): (None if math.isnan(value) else value) for layer, value in by_layer.items()}
                for name, by_layer in self.values.items()
            },
            "picks": self.picks(),
        }

    @classmethod
    def from_json(cls, record: dict) -> LayerRanking:
        values = {
            name: {int(layer): (math.nan if value is None else value) for layer, value in by_layer.items()}
            for name, by_layer in record["measures"].items()
        }
        fields_ = {key: record.get(key) for key in ("backbone", "dataset", "texts", "tokens", "seconds")}
        return cls(**fields_, peak_memory_bytes=record.get("peak_memory_bytes"), values=values)


def sampled(texts: list, count: int, seed: int) -> list:
    """`count` of `texts` drawn without replacement by `seed` (all of them, in order, where there are no more)."""
    if count >= len(texts):
        return list(texts)
    return [texts[i] for i in sorted(random.Random(seed).sample(range(len(texts)), count))]


def pooled_nbytes(texts: int, layers: int, hidden: int) -> int:
    """What the pooled vectors the measures keep take (float64)."""
    return texts * layers * hidden * 8


def check_memory(model, texts: int, batch_size: int, max_memory: int | None) -> None:
    """Refuse, before the pass, a budget that the model, one batch's states and the pooled vectors overrun."""
    if max_memory is None:
        return
    config = model.config.encoder_config
    layers, hidden = config.num_hidden_layers + 1, config.hidden_size
    batch_states = batch_size * MAX_TOKENS * layers * hidden * 4
    needed = model_nbytes(model) + batch_states + pooled_nbytes(texts, layers, hidden)
    if needed > max_memory:
        raise ValueError(
            f"--max-memory {gib(max_memory)}: the backbone ({gib(model_nbytes(model))}), one batch's states and "
            f"{texts} texts' pooled states need {gib(needed)}; give fewer --texts, a smaller --batch-size or a "
            "smaller --backbone-dtype"
        )


def rank_layers(
    backbone: str | None,
    task: str = "ner",
    dataset: str | None = None,
    data_dir: str | None = None,
    texts: int = 256,
    seed: int = 0,
    batch_size: int = 16,
    backbone_dtype: str = "auto",
    max_memory: int | None = None,
    columns: dict | None = None,
    progress: Callable[[int], None] | None = None,
) -> LayerRanking:
    """Every measure on every layer of `backbone` over `texts` texts of the task's training split (drawn by
    `seed`), in one backbone pass of `batch_size` texts at a time; `progress(texts_done)` after each batch."""
    started = time.perf_counter()
    kind = task_named(task).kind
    if kind not in TEXTS_OF_KIND:
        raise ValueError(f"--task {task}: rank-layers ranks the layers for a labelled head (ner, cls)")
    chosen = sampled(TEXTS_OF_KIND[kind](task, dataset, data_dir, columns or {}), texts, seed)
    if not chosen:
        raise ValueError("the training split holds no text to rank the layers on")
    folder = backbone_folder(backbone)
    model = DWAttForTokenClassification.from_backbone(folder, fusion="base", backbone_dtype=backbone_dtype).eval()
    check_memory(model, len(chosen), batch_size, max_memory)
    tokenizer = load_tokenizer(folder)
    limit = min(MAX_TOKENS, tokenizer.model_max_length)
    measures: list[LayerMeasures] = []
    tokens = 0
    for start in range(0, len(chosen), batch_size):
        encoded = _encode(tokenizer, chosen[start : start + batch_size], limit)
        keep = encoded.pop("special_tokens_mask").eq(0) & encoded["attention_mask"].bool()
        with torch.inference_mode():
            states = model.dwatt.run_backbone(**encoded)
        measures = measures or [LayerMeasures() for _ in states]
        for row in range(keep.shape[0]):
            positions = keep[row]
            tokens += int(positions.sum())
            for layer, state in enumerate(states):
                measures[layer].add(state[row, positions].float().numpy())
        if progress is not None:
            progress(min(start + batch_size, len(chosen)))
    values = {name: {} for name in MEASURES}
    for layer, layer_measures in enumerate(measures):
        for name, value in layer_measures.values().items():
            values[name][layer] = value
    return LayerRanking(
        backbone=backbone_label(backbone),
        dataset=task_named(task).dataset_for(dataset, data_dir),
        texts=len(chosen),
        tokens=tokens,
        seconds=time.perf_counter() - started,
        peak_memory_bytes=peak_memory_bytes(),
        values=values,
    )


def peak_memory_bytes() -> int | None:
    """This process's peak resident memory so far (Linux and macOS report it; elsewhere None)."""
    if resource is None:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)  # macOS reports bytes, Linux KiB


def measures_table(ranking: LayerRanking) -> list[str]:
    """The values by layer (a row each), then each measure's pick, as the command prints them."""
    names = list(ranking.values)
    header = "layer | " + " | ".join(names)
    rows = [header, "-" * len(header)]
    for layer in ranking.layers:
        rows.append(f"{layer:>5} | " + " | ".join(f"{ranking.values[name][layer]:>{len(name)}.4g}" for name in names))
    picks = ranking.picks()
    rows.append(" pick | " + " | ".join(f"{picks[name]!s:>{len(name)}}" for name in names))
    return rows


def draw_ranking(ranking: LayerRanking, path: Path) -> Path | None:
    """One panel per measure, its value by layer, its pick starred. None, with a note, where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        print('no figure: it needs matplotlib (pip install "dwatt[probe]")')
        return None
    picks = ranking.picks()
    figure, axes = plt.subplots(1, len(ranking.values), figsize=(3.0 * len(ranking.values), 2.8), squeeze=False)
    for axis, (name, by_layer) in zip(axes[0], ranking.values.items()):
        layers = sorted(by_layer)
        axis.plot(layers, [by_layer[layer] for layer in layers], "o-", markersize=3, linewidth=1.2)
        if picks[name] is not None:
            axis.plot(
                [picks[name]], [by_layer[picks[name]]], marker="*", markersize=13, color="black", linestyle="none"
            )
        better = "higher" if MEASURES[name].higher_is_better else "lower"
        axis.set(xlabel="layer", title=f"{name.replace('_', ' ')}\n({better} picked: {picks[name]})")
        axis.title.set_fontsize(9)
        axis.grid(alpha=0.3)
    figure.suptitle(
        f"{ranking.backbone} on {ranking.dataset}: {ranking.texts} texts, no labels; one pass, {ranking.seconds:.0f} s",
        fontsize=10,
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


__all__ = ["TEXTS_OF_KIND", "draw_ranking", "LayerRanking", "check_memory", "measures_table", "rank_layers", "sampled"]
