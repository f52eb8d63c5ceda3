"""`dwatt export --format transformers`: a head on one layer of a cut backbone as the stock transformers model it is.

A tagger whose head reads layer k alone (the `base` fusion: what `dwatt probe` chooses and saves) computes exactly what
the family's own `<Family>ForTokenClassification` computes with `num_hidden_layers = k` and that head as its
classifier, where the stock class hands its classifier the last layer's output unchanged (encoders such as BERT,
RoBERTa, XLM-R, MPNet, DeBERTa). Written that way, the folder loads with `AutoModelForTokenClassification
.from_pretrained(folder)` and no remote code (no `auto_map`, no `*_dwatt.py`), in `pipeline("token-classification")`
and in serving engines that load stock architectures. A decoder LLM's stock class applies the backbone's final norm
after layer k: its head exports so where it reads its layer through that norm (`through_final_norm`, `dwatt probe
--through-final-norm`), or reads the last layer, which the backbone returns normed. What is not such a model is refused
in one line that says why: fusions of several layers, probe ensembles, other tasks, a decoder's head on a middle layer
read without the norm, and families whose stock class puts a head of its own between the last layer and the
classifier. A text classifier exports where its family's stock `<Family>ForSequenceClassification` pools and scores
as its head does: an encoder's head on the first token (`--pooling first`: RoBERTa's dense, tanh and projection, which
BERT's pooler and classifier compute too), a decoder's on the last token through the final norm with one linear map
without a bias (what `--through-final-norm` trains). Every export is checked: the stock model, loaded back from the
folder, gives the checkpoint's logits.
"""

from __future__ import annotations

import copy
import gc
import re
from pathlib import Path

import torch
import transformers
from torch import nn

from configuration_dwatt import is_decoder_only, with_legacy_rope
from depth_dwatt import cut_config, layers_past_pattern

from ..atomic import give_usual_modes, read_json, replace_folder, scratch_folder, sha256_of, write_json_atomically
from ..checkpoints import is_ensemble, load_checkpoint
from ..portable import portable_path
from ..tasks import TASKS, Task, task_of_model
from ..tokenization import save_tokenizer
from .export import check_batch
from .export_memory import check_export_memory

STOCK_RECORD = "dwatt_stock_export.json"
TOLERANCE = 1e-4  # of the largest logit: float noise of the same computation in another module tree


def stock_refusal(model, task: str) -> str | None:
    """Why `model` is no stock transformers architecture (one line), or None where it is one."""

    config = model.config
    family, decoder = config.encoder_config.model_type, is_decoder_only(config.encoder_config)
    if model_task(model).pools:  # a text classifier: pooled, then its head
        refusal = _sequence_head_refusal(config, family, decoder)
        if refusal:
            return (
                f"a {task} head has no stock transformers class that computes it: {refusal}; export it to ONNX instead"
            )
    elif not model_task(model).labelled:  # a masked LM's vocabulary head; a tagger's is one linear map per token
        return (
            f"a {task} head has no stock transformers class that computes it: the stock {family} classes put a "
            "head of their own between the last layer and the labels; export it to ONNX instead"
        )
    if config.word_readout != "first":
        return (
            f"it reads each word as {config.word_readout!r}, and a stock tagger and transformers' pipeline read each "
            "word at its first sub-token from the tokens alone (no word ids, the input given once); export it to "
            "ONNX, which takes the word ids, or train it with --word-readout first"
        )
    spec = config.fusion_spec
    if not spec.passes_layer_through:
        return (
            f"its head reads the {spec.display_name} fusion of several layers, which no stock architecture computes; "
            "export a head on one layer (`dwatt probe`'s choice, or `--fusion base`), or export to ONNX"
        )
    if config.include_embeddings:
        return "its head reads the embedding output too, which no stock architecture hands its classifier"
    reads_unnormed = config.read_layer < config.encoder_config.num_hidden_layers
    if decoder and reads_unnormed and not config.through_final_norm:
        return (
            f"the stock {family} classes apply the backbone's final norm after layer {config.read_layer}, and this "
            "head reads the layer without it: train it reading its layer through the norm (--through-final-norm), "
            "or export it to ONNX"
        )
    return None


def _sequence_head_refusal(config, family: str, decoder: bool) -> str | None:
    """Why a text classifier's pooling and head differ from its family's stock sequence classifier's, or None."""
    if decoder and (config.pooling, config.sequence_head) != ("last", "linear"):
        return (
            f"the stock {family} sequence classifier scores the last token with one linear map without a bias, and "
            f"this head pools by {config.pooling!r} into a {config.sequence_head!r} head (train it with "
            "--through-final-norm, which reads the last token through the final norm with such a head)"
        )
    if not decoder and (config.pooling, config.sequence_head) != ("first", "dense_tanh"):
        return (
            f"the stock {family} sequence classifier reads the first token through a dense layer and tanh, and this "
            f"head pools by {config.pooling!r} into a {config.sequence_head!r} head (train it with --pooling first)"
        )
    return None


def _stock_head(stock: nn.Module) -> nn.Linear:
    """The stock model's classifier: its one `nn.Linear` beside the base model, with nothing but dropout between;
    ValueError naming what else the class puts there."""
    others = {
        name: module
        for name, module in stock.named_children()
        if module is not stock.base_model and not isinstance(module, nn.Dropout)
    }
    linears = [module for module in others.values() if isinstance(module, nn.Linear)]
    if len(others) != 1 or len(linears) != 1:
        raise ValueError(
            f"the stock {type(stock).__name__} puts {', '.join(sorted(others))} between the backbone and the "
            "labels, where this head is one linear map; export it to ONNX instead"
        )
    return linears[0]


def stock_model(model, pad_token_id: int | None = None) -> nn.Module:
    """The stock model of `model`'s family and task (`AutoModelForTokenClassification`, or
    `AutoModelForSequenceClassification` for a text classifier), cut to the layer its head reads, holding the
    backbone's weights and the head as its classifier (in eval mode, fp32). `pad_token_id`: where the backbone's config
    has none, the tokenizer's, by which a stock decoder classifier finds each row's last token."""

    config = cut_config(model.config.encoder_config, model.config.read_layer)
    config.num_labels = model.config.num_labels
    config.id2label = {int(i): label for i, label in model.config.id2label.items()}
    config.label2id = {label: i for i, label in config.id2label.items()}
    config.problem_type = model.config.problem_type
    if getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = pad_token_id
    for key in ("auto_map", "architectures"):
        if getattr(config, key, None) is not None:
            setattr(config, key, None)
    stock = stock_class(model).from_config(copy.deepcopy(config)).float().eval()
    weights = model.dwatt.backbone.state_dict()
    # layers the backbone holds past the one the head reads (a head on the embedding output keeps layer 1, one saved
    # with a deeper `backbone_depth` keeps more): unread, and the stock model cut to the head's layer has none of them
    if model.config.read_layer < model.config.run_depth:
        past = re.compile(
            layers_past_pattern(model.dwatt.backbone, model.config.encoder_config, model.config.read_layer)
        )
        weights = {key: value for key, value in weights.items() if not past.search(f"backbone.{key}")}
    # assigned, not copied: the stock model holds the checkpoint's tensors, and the random ones it was built with go
    # (one copy of a 1.5B backbone's layers in memory, not two)
    missing, unexpected = stock.base_model.load_state_dict(weights, strict=False, assign=True)
    filled = _place_head(model, stock)  # the head's weights: a stock BERT's pooler among them
    missing = [key for key in missing if f"{stock.base_model_prefix}.{key}" not in filled]
    unexpected = [key for key in unexpected if not key.startswith("pooler.")]  # a pooler the head never reads
    if missing or unexpected:
        raise ValueError(
            f"the stock {type(stock).__name__} does not hold this backbone's weights as they are "
            f"(missing: {', '.join(missing[:3]) or 'none'}; not taken: {', '.join(unexpected[:3]) or 'none'})"
        )
    return stock


def model_task(model) -> Task:
    """The task of `model`, a DWAtt task model (`task_of_model`); ValueError for anything else."""
    task = task_of_model(model)
    if task is None:
        raise ValueError(f"a stock export takes a DWAtt task model, not a {type(model).__name__}")
    return task


def stock_class(model) -> type:
    """The Auto class whose stock model computes `model`: its task's (a tagger's or a text classifier's)."""

    return getattr(transformers, model_task(model).auto_class)


def _place_head(model, stock: nn.Module) -> set[str]:
    """Copy `model`'s head into `stock`'s classifier; the names of the stock parameters it filled. A tagger's one
    linear map is the stock classifier; a text classifier's maps go where its family's stock class keeps them."""
    if model_task(model).pools:
        targets = _stock_sequence_head(stock, len(model.head_linear_maps()))
        sources = [(source.weight, source.bias) for source in model.head_linear_maps()]
    else:
        targets, sources = {"": _stock_head(stock)}, [model.classifier_parameters()]
    names = {module: name for name, module in stock.named_modules()}
    with torch.no_grad():
        for target, (weight, bias) in zip(targets.values(), sources, strict=True):
            target.weight.copy_(weight)
            if target.bias is not None:
                target.bias.copy_(bias if bias is not None else torch.zeros_like(target.bias))
            elif bias is not None:
                raise ValueError(f"the stock {type(stock).__name__}'s classifier has no bias, and this head has one")
    return {f"{names[target]}.{key}" for target in targets.values() for key, _ in target.named_parameters()}


def _stock_sequence_head(stock: nn.Module, maps: int) -> dict[str, nn.Linear]:
    """The stock text classifier's linear maps that a head of `maps` maps fills, in the order they apply: its one
    classifier (decoders' `score`), RoBERTa's kind of `classifier.dense` and `.out_proj`, or BERT's pooler and
    classifier; ValueError where the class keeps them otherwise."""
    if maps == 1:
        return {"classifier": _stock_head(stock)}
    head = getattr(stock, "classifier", None)
    if isinstance(getattr(head, "dense", None), nn.Linear) and isinstance(getattr(head, "out_proj", None), nn.Linear):
        return {"dense": head.dense, "out_proj": head.out_proj}
    pooler = getattr(getattr(stock.base_model, "pooler", None), "dense", None)
    if isinstance(pooler, nn.Linear) and isinstance(head, nn.Linear):
        return {"pooler": pooler, "classifier": head}
    raise ValueError(
        f"the stock {type(stock).__name__} keeps no dense layer and projection (nor a pooler and classifier) for "
        "this head's two maps; export it to ONNX instead"
    )


def _logits(model, batch: dict) -> torch.Tensor:
    """`model`'s logits on `batch`; a tagger's at the real tokens alone (the padding's are no one's)."""
    with torch.no_grad():
        logits = model(**batch).logits.float()
    return logits[batch["attention_mask"].bool()] if logits.dim() == 3 else logits


def export_stock(checkpoint: str | Path, output: str | Path, max_memory: int | None = None) -> dict:
    """Write `checkpoint` (a tagger or a text classifier whose head reads one layer) into `output` as its family's
    stock `<Family>ForTokenClassification` or `<Family>ForSequenceClassification`, with its tokenizer, a card and `dwatt_stock_export.json`, after checking that
    the folder, loaded back by transformers without remote code, gives the checkpoint's logits on a padded batch.
    ValueError (one line: why) where the checkpoint is no stock architecture. Written into a scratch folder and
    swapped in whole (`replace_folder`); `output` must be new, empty or an earlier stock export. Refused before anything
    heavy runs where it would take more memory than `max_memory` (bytes) or than is available
    (`dwatt.serving.export_memory.check_export_memory`)."""

    output = Path(output)
    if output.exists() and not (output.is_dir() and ((output / STOCK_RECORD).is_file() or not any(output.iterdir()))):
        raise ValueError(f"{output}: not a stock export (no {STOCK_RECORD}), and exporting would replace it")
    if is_ensemble(checkpoint):
        raise ValueError(
            f"{checkpoint}: a probe ensemble averages several heads, which no stock architecture computes; "
            "export its best member, or export the ensemble to ONNX"
        )
    model, tokenizer, task = load_checkpoint(checkpoint)
    refusal = stock_refusal(model, task)
    if refusal:
        raise ValueError(f"{checkpoint}: no stock transformers model: {refusal}")
    check_export_memory(checkpoint, model, None, max_memory, stock=True)
    model.float()
    stock = stock_model(model, tokenizer.pad_token_id)
    decoder = is_decoder_only(model.config.encoder_config)
    if decoder:
        # the stock decoder counts positions from the first token, padding included, where dwatt counts from the
        # first real one: the two agree on right padding, which the folder's tokenizer keeps
        tokenizer.padding_side = "right"
    batch = check_batch(tokenizer, ["input_ids", "attention_mask"])
    ours = _logits(model, batch)
    layer, depth = model.config.read_layer, model.config.encoder_config.num_hidden_layers
    auto, id2label, pipeline_tag = stock_class(model), model.config.id2label, TASKS[task].pipeline_tag
    backbone = portable_path(model.config.backbone_name_or_path)  # None passes as None
    with scratch_folder(output) as staging:
        stock.save_pretrained(staging)
        del model, stock  # the weights they share go before the folder is loaded back: one copy held at a time
        gc.collect()
        write_json_atomically(staging / "config.json", with_legacy_rope(read_json(staging / "config.json")))
        save_tokenizer(tokenizer, staging)
        loaded = auto.from_pretrained(staging, trust_remote_code=False).float().eval()
        theirs = _logits(loaded, {name: batch[name] for name in ("input_ids", "attention_mask")})
        difference, largest = (ours - theirs).abs().max().item(), ours.abs().max().item()
        tolerance = TOLERANCE * max(1.0, largest)
        if not difference <= tolerance:
            raise ValueError(
                f"{checkpoint}: the stock {type(loaded).__name__} gives other logits than the checkpoint (by "
                f"{difference:.2e}, over {tolerance:.2e}): its family hands the classifier something else than "
                "the layer's output; export it to ONNX instead"
            )
        (staging / "README.md").write_text(
            stock_card(checkpoint, type(loaded).__name__, layer, depth, difference, id2label, pipeline_tag, decoder)
        )
        record = {
            "format": "transformers",
            "source": portable_path(checkpoint),
            "architecture": type(loaded).__name__,
            "layer": layer,
            "backbone_layers": depth,
            "backbone": backbone,
            "check": {"max_abs_logit_difference": difference, "largest_logit": largest, "tolerance": tolerance},
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "sha256": {path.name: sha256_of(path) for path in sorted(staging.iterdir()) if path.is_file()},
        }
        write_json_atomically(staging / STOCK_RECORD, record)
        give_usual_modes(staging)
        replace_folder(staging, output)
    return record


def stock_card(
    checkpoint,
    architecture: str,
    layer: int,
    depth: int,
    difference: float,
    id2label: dict,
    pipeline_tag: str = "token-classification",
    decoder: bool = False,
) -> str:
    """The stock export's README.md: what it is, how to load it, and how it was checked."""
    labels = ", ".join(str(label) for _, label in sorted(id2label.items(), key=lambda item: int(item[0])))
    aggregation = ', aggregation_strategy="first"' if pipeline_tag == "token-classification" else ""
    normed = (
        " The head reads its layer through the backbone's final norm, as the stock class applies it after its last "
        "layer. Like transformers' own decoder classifiers, it counts positions from the first token, padding "
        "included: pad on the right (the tokenizer here does), or pass one text at a time as `pipeline` does."
        if decoder
        else ""
    )
    return (
        f"# {architecture}: a {pipeline_tag} head on layer {layer} of {depth}\n\n"
        f"Written by `dwatt export --format transformers` from `{portable_path(checkpoint)}`: the backbone cut to "
        f"its first {layer} layers, the head as the stock classifier. A stock transformers model, no remote code:\n\n"
        "```python\n"
        "from transformers import pipeline\n\n"
        f'classifier = pipeline("{pipeline_tag}", model="FOLDER"{aggregation})\n'
        "```\n\n"
        f"Labels: {labels}. Checked when written: loaded back without remote code, its logits are the checkpoint's "
        f"within {difference:.1e} on a padded batch. `{STOCK_RECORD}` records every file's sha256.{normed}\n"
    )


__all__ = ["STOCK_RECORD", "export_stock", "stock_class", "stock_model", "stock_refusal"]
