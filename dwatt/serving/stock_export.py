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
classifier. Every export is checked: the stock model, loaded back from the folder, gives the checkpoint's logits.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import torch
from torch import nn

from ..portable import portable_path
from ..tokenization import save_tokenizer

STOCK_RECORD = "dwatt_stock_export.json"
TOLERANCE = 1e-4  # of the largest logit: float noise of the same computation in another module tree


def stock_refusal(model, task: str) -> str | None:
    """Why `model` is no stock transformers architecture (one line), or None where it is one."""
    from configuration_dwatt import is_decoder_only

    family = model.config.encoder_config.model_type
    if not hasattr(model, "token_linear_map") and is_decoder_only(model.config.encoder_config):
        return (
            f"a {task} head has no stock transformers class that computes it: the stock {family} sequence classifier "
            "scores the last token with a linear map without a bias, and this head's classifier has one; export it "
            "to ONNX instead"
        )
    if not hasattr(model, "token_linear_map"):  # a tagger's head is one linear map per token
        return (
            f"a {task} head has no stock transformers class that computes it: the stock {family} classes put a "
            "pooler or a head of their own between the last layer and the labels; export it to ONNX instead"
        )
    spec = model.config.fusion_spec
    if not spec.passes_layer_through:
        return (
            f"its head reads the {spec.display_name} fusion of several layers, which no stock architecture computes; "
            "export a head on one layer (`dwatt probe`'s choice, or `--fusion base`), or export to ONNX"
        )
    if model.config.include_embeddings:
        return "its head reads the embedding output too, which no stock architecture hands its classifier"
    reads_unnormed = model.config.read_layer < model.config.encoder_config.num_hidden_layers
    if is_decoder_only(model.config.encoder_config) and reads_unnormed and not model.config.through_final_norm:
        return (
            f"the stock {model.config.encoder_config.model_type} classes apply the backbone's final norm after layer "
            f"{model.config.read_layer}, and this head reads the layer without it: train it reading its layer through "
            "the norm (--through-final-norm), or export it to ONNX"
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


def stock_model(model) -> nn.Module:
    """The stock `AutoModelForTokenClassification` of `model`'s family, cut to the layer its head reads, holding the
    backbone's weights and the head as its classifier (in eval mode, fp32)."""
    from transformers import AutoModelForTokenClassification

    from depth_dwatt import cut_config, layers_past_pattern

    config = cut_config(model.config.encoder_config, model.config.read_layer)
    config.num_labels = model.config.num_labels
    config.id2label = {int(i): label for i, label in model.config.id2label.items()}
    config.label2id = {label: i for i, label in config.id2label.items()}
    for key in ("auto_map", "architectures"):
        if hasattr(config, key):
            setattr(config, key, None)
    stock = AutoModelForTokenClassification.from_config(copy.deepcopy(config)).float().eval()
    weights = model.dwatt.backbone.state_dict()
    # layers the backbone holds past the one the head reads (a head on the embedding output keeps layer 1, one saved
    # with a deeper `backbone_depth` keeps more): unread, and the stock model cut to the head's layer has none of them
    if model.config.read_layer < model.config.run_depth:
        past = re.compile(
            layers_past_pattern(model.dwatt.backbone, model.config.encoder_config, model.config.read_layer)
        )
        weights = {key: value for key, value in weights.items() if not past.search(f"backbone.{key}")}
    missing, unexpected = stock.base_model.load_state_dict(weights, strict=False)
    unexpected = [key for key in unexpected if not key.startswith("pooler.")]  # a pooler the tagger never reads
    if missing or unexpected:
        raise ValueError(
            f"the stock {type(stock).__name__} does not hold this backbone's weights as they are "
            f"(missing: {', '.join(missing[:3]) or 'none'}; not taken: {', '.join(unexpected[:3]) or 'none'})"
        )
    head = _stock_head(stock)
    weight, bias = model.classifier_parameters()
    with torch.no_grad():
        head.weight.copy_(weight)
        head.bias.copy_(bias)
    return stock


def _largest_difference(model, stock, batch: dict) -> tuple[float, float]:
    with torch.no_grad():
        ours = model(**batch).logits.float()
        theirs = stock(**{name: batch[name] for name in ("input_ids", "attention_mask")}).logits.float()
    mask = batch["attention_mask"].bool()
    return (ours - theirs)[mask].abs().max().item(), ours[mask].abs().max().item()


def export_stock(checkpoint: str | Path, output: str | Path) -> dict:
    """Write `checkpoint` (a tagger whose head reads one layer) into `output` as its family's stock
    `<Family>ForTokenClassification`, with its tokenizer, a card and `dwatt_stock_export.json`, after checking that
    the folder, loaded back by transformers without remote code, gives the checkpoint's logits on a padded batch.
    ValueError (one line: why) where the checkpoint is no stock architecture. Written into a scratch folder and
    swapped in whole (`replace_folder`); `output` must be new, empty or an earlier stock export."""
    import transformers
    from transformers import AutoModelForTokenClassification

    from configuration_dwatt import is_decoder_only

    from ..atomic import give_usual_modes, replace_folder, scratch_folder, sha256_of, write_json_atomically
    from ..checkpoints import is_ensemble, load_checkpoint
    from .export import check_batch

    output = Path(output)
    if output.exists() and not (output.is_dir() and ((output / STOCK_RECORD).is_file() or not any(output.iterdir()))):
        raise ValueError(f"{output}: not a stock export (no {STOCK_RECORD}), and exporting would replace it")
    if is_ensemble(checkpoint):
        raise ValueError(
            f"{checkpoint}: a probe ensemble averages several heads, which no stock architecture computes; "
            "export its best member, or export the ensemble to ONNX"
        )
    model, tokenizer, task = load_checkpoint(checkpoint)
    model.float()
    refusal = stock_refusal(model, task)
    if refusal:
        raise ValueError(f"{checkpoint}: no stock transformers model: {refusal}")
    stock = stock_model(model)
    if is_decoder_only(model.config.encoder_config):
        # the stock decoder counts positions from the first token, padding included, where dwatt counts from the
        # first real one: the two agree on right padding, which the folder's tokenizer keeps
        tokenizer.padding_side = "right"
    batch = check_batch(tokenizer, ["input_ids", "attention_mask"])
    with scratch_folder(output) as staging:
        stock.save_pretrained(staging)
        save_tokenizer(tokenizer, staging)
        loaded = AutoModelForTokenClassification.from_pretrained(staging, trust_remote_code=False).float().eval()
        difference, largest = _largest_difference(model, loaded, batch)
        tolerance = TOLERANCE * max(1.0, largest)
        if not difference <= tolerance:
            raise ValueError(
                f"{checkpoint}: the stock {type(loaded).__name__} gives other logits than the checkpoint (by "
                f"{difference:.2e}, over {tolerance:.2e}): its family hands the classifier something else than "
                "the layer's output; export it to ONNX instead"
            )
        layer, depth = model.config.read_layer, model.config.encoder_config.num_hidden_layers
        (staging / "README.md").write_text(
            stock_card(
                checkpoint,
                type(loaded).__name__,
                layer,
                depth,
                difference,
                model.config.id2label,
                is_decoder_only(model.config.encoder_config),
            )
        )
        record = {
            "format": "transformers",
            "source": portable_path(checkpoint),
            "architecture": type(loaded).__name__,
            "layer": layer,
            "backbone_layers": depth,
            "backbone": portable_path(model.config.backbone_name_or_path),  # None passes as None
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
    checkpoint, architecture: str, layer: int, depth: int, difference: float, id2label: dict, decoder: bool = False
) -> str:
    """The stock export's README.md: what it is, how to load it, and how it was checked."""
    labels = ", ".join(str(label) for _, label in sorted(id2label.items(), key=lambda item: int(item[0])))
    normed = (
        " The head reads its layer through the backbone's final norm, as the stock class applies it after its last "
        "layer. Like transformers' own decoder classifiers, it counts positions from the first token, padding "
        "included: pad on the right (the tokenizer here does), or tag one text at a time as `pipeline` does."
        if decoder
        else ""
    )
    return (
        f"# {architecture}: a token-classification head on layer {layer} of {depth}\n\n"
        f"Written by `dwatt export --format transformers` from `{portable_path(checkpoint)}`: the backbone cut to "
        f"its first {layer} layers, the head as the stock classifier. A stock transformers model, no remote code:\n\n"
        "```python\n"
        "from transformers import pipeline\n\n"
        'tagger = pipeline("token-classification", model="FOLDER", aggregation_strategy="first")\n'
        "```\n\n"
        f"Labels: {labels}. Checked when written: loaded back without remote code, its logits are the checkpoint's "
        f"within {difference:.1e} on a padded batch. `{STOCK_RECORD}` records every file's sha256.{normed}\n"
    )


__all__ = ["STOCK_RECORD", "export_stock", "stock_model", "stock_refusal"]
