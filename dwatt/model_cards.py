"""Model cards: the README.md a pushed checkpoint or probe ensemble carries (the Hub's metadata through
`huggingface_hub.ModelCardData`, what the head reads and how it was trained, how to load it), written from the model's
own config and the run's results."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from configuration_dwatt import is_decoder_only

from .data.files import is_local_path
from .defaults import known_hub_id
from .tasks import TASKS, task_of_model

TAGS = ["dwatt", "layer-fusion"]
DATASET_IDS = {"conll2003": "conll2003", "wikiann": "wikiann", "wikitext": "wikitext", "ag_news": "ag_news"}


def _dataset_id(name: str | None) -> str | None:
    if not name:
        return None
    return DATASET_IDS.get(name.split(":", 1)[0], name)


def base_model_name(backbone: str | None) -> str | None:
    """How a card names the backbone (its `base_model`): a Hub id as given; a folder by the Hub id of the model the
    packaged default ships, or else by its name. A card never names a folder of the machine it was written on."""
    if backbone is None or not is_local_path(backbone):
        return backbone
    folder = Path(backbone).expanduser().resolve()
    return known_hub_id(folder) or folder.name


def card_text(metadata: ModelCardData, body: list[str]) -> str:
    """A README.md: the metadata as the Hub reads it (YAML between `---` lines), then the body's lines."""
    return str(ModelCard("\n".join(["---", metadata.to_yaml(), "---", "", *body])))


def fusion_reads(config) -> str:
    """What the fusion reads, for the model card: the last layer (and its extra layers) or the layers it mixes."""
    depth = config.encoder_config.num_hidden_layers
    fusion = config.fusion_spec
    if fusion.passes_layer_through:
        layer = config.read_layer
        if layer == 0:
            return f"(the embedding output, below the backbone's {depth} layers)"
        return (
            f"(the last of the backbone's {depth} layers)"
            if layer == depth
            else f"(layer {layer} of the backbone's {depth})"
        )
    if fusion.needs_layer_inputs:
        extra = config.num_extra_layers
        return f"({extra} extra layer{'s' if extra != 1 else ''} over the last of the backbone's {depth})"
    count = len(config.fused_layer_numbers)
    chosen = "all" if count == depth else f"{count} (`{config.fused_layers}`)"
    return f"over {chosen} of the backbone's {depth} layers" + (
        " and its embedding output" if config.include_embeddings else ""
    )


def backbone_run(config) -> str:
    """How much of the backbone the model runs, for the model card."""
    depth, total = config.run_depth, config.encoder_config.num_hidden_layers
    if depth == total:
        return f"runs all {total} layers"
    return (
        f"runs layers 1–{depth} of {total} (the layers past the deepest one the fusion reads are dropped: "
        f"{total - depth} of {total} not computed, not stored)"
    )


def fusion_settings(config) -> str:
    """The fusion's own hyper-parameters, for the model card: " (d_pos 24, query_bottleneck 0.5, ...)"."""
    keys = config.fusion_spec.hyperparameters
    return f" ({', '.join(f'{key} {getattr(config, key)}' for key in keys)})" if keys else ""


def model_card(
    model,
    results: dict | None = None,
    repo_id: str | None = None,
    heads_only: bool = True,
    has_tokenizer: bool = False,
    subfolder: str | None = None,
) -> str:
    """
    README.md for a DWAtt checkpoint: YAML metadata (library_name, base_model, tags, datasets, metrics and the
    run's results as model-index), the fusion and training mode, the measured scores, and a usage snippet with
    `trust_remote_code=True` (loading from `subfolder` of the repo where the checkpoint is one of several, as an
    ensemble's members are).
    """
    config = model.config
    task = task_of_model(model) or TASKS["ner"]
    pipeline_tag = task.pipeline_tag
    base_model = base_model_name(config.backbone_name_or_path)
    run = (results or {}).get("config", {})
    # a Hub dataset's id; the user's own files (a data folder) are no Hub dataset, and are named in the text only
    dataset = None if run.get("data_dir") else _dataset_id(run.get("dataset"))
    scores = {}
    if results and task.kind == "classification" and f"best_dev_{task.score}" in results:  # a text task
        scores = {task.score: results[f"best_dev_{task.score}"]}
        if results.get("best_dev_macro_f1") is not None:
            scores["f1"] = results["best_dev_macro_f1"]
    elif results and "best_dev_f1" in results:
        scores = {"f1": results["best_dev_f1"]}
        for key in ("precision", "recall", "accuracy"):
            if key in results.get("best_dev_scores", {}):
                scores[key] = results["best_dev_scores"][key]
    metadata = ModelCardData(
        library_name="transformers",
        base_model=base_model,
        pipeline_tag=pipeline_tag,
        tags=TAGS + [pipeline_tag, f"fusion-{config.fusion}"] + (["lora"] if config.lora else []),
        license="apache-2.0",
        datasets=[dataset] if dataset else None,
        metrics=sorted(scores) or None,
        model_name=(repo_id or "dwatt-model") if scores else None,
        eval_results=[
            EvalResult(
                task_type=pipeline_tag,
                dataset_type=dataset or "unknown",
                dataset_name=run.get("dataset", "unknown"),
                dataset_split="validation",
                metric_type=name,
                metric_value=round(float(value), 4),
            )
            for name, value in sorted(scores.items())
        ]
        or None,
    )
    auto_class = task.auto_class
    checkpoint = f'"{repo_id or "path/to/checkpoint"}"' + (f', subfolder="{subfolder}"' if subfolder else "")
    tokenizer_source = checkpoint if has_tokenizer else f'"{base_model}"'
    trust_tokenizer = ", trust_remote_code=True" if has_tokenizer else ""  # a plain backbone's has nothing to trust
    mode = {"fe": "FE (frozen backbone; fusion and head trained)", "ft": "FT (everything trained)"}.get(
        run.get("mode"), "unknown"
    )
    if config.lora:
        lora = config.lora
        mode = (
            f"LoRA (low-rank adapters of rank {lora['rank']}, alpha {lora['alpha']:g}, on the backbone's "
            f"{', '.join(f'`{t}`' for t in lora['targets'])} layers; fusion and head trained)"
        )
    lines = [
        f"# {repo_id or 'DWAtt checkpoint'}" + (f" ({subfolder})" if subfolder else ""),
        "",
        f"A `{config.fusion}` layer-fusion model ({type(model).__name__}) over the "
        f"{'decoder LLM' if is_decoder_only(config.encoder_config) else 'encoder'} `{base_model}`"
        + (f" at revision `{config.backbone_revision}`" if config.backbone_revision else "")
        + ", made with dwatt (Depth-Wise Attention layer fusion, COLING 2024).",
        "",
        f"- Fusion: `{config.fusion}` {fusion_reads(config)}{fusion_settings(config)}"
        + (", every layer read through the backbone's final norm" if config.through_final_norm else "")
        + (
            f"; each word read as `{config.word_readout}` (`word_readout`: the model takes `word_ids` beside the tokens)"
            if config.word_readout != "first"
            else ""
        ),
        f"- Backbone: {backbone_run(config)}",
        f"- Training mode: {mode}",
        f"- Checkpoint: {'head-only: fusion module and task head; the backbone is loaded from `base_model`' if heads_only else 'full'}"
        + (
            (
                "; the adapters' A and B matrices travel with it and are merged into the backbone when it loads "
                "(W + alpha/rank BA, plain torch)"
            )
            if heads_only and config.lora
            else "; the backbone's weights include the merged LoRA updates"
            if config.lora
            else ""
        ),
    ]
    if results:
        examples = (
            f"{results.get('num_train_examples')} training examples"
            if "num_train_examples" in results
            else f"{results.get('num_train_sentences')} training sentences"
        )
        lines.append(
            f"- Data: {run.get('dataset')}{' (the trainer’s own files)' if run.get('data_dir') else ''} with {examples} "
            f"(N = {run.get('n_shot')}, seed {results.get('seed')}), {run.get('epochs')} epochs"
        )
        scorer = "accuracy and macro-F1" if "best_dev_accuracy" in results else "seqeval"
        lines += ["", f"## Results (validation split, {scorer})", "", "| metric | value |", "|---|---|"]
        lines += [f"| {name} | {100 * float(value):.2f} |" for name, value in sorted(scores.items())]
        lines.append(f"| best epoch | {results.get('best_epoch')} |")
    lines += [
        "",
        "## Usage",
        "",
        "```python",
        f"from transformers import {auto_class}, AutoTokenizer",
        "",
        f"model = {auto_class}.from_pretrained({checkpoint}, trust_remote_code=True)",
        f"tokenizer = AutoTokenizer.from_pretrained({tokenizer_source}{trust_tokenizer})",
        "```",
        "",
        "`trust_remote_code=True` runs the `*_dwatt.py` files of this repository (`modeling_dwatt.py` and the files it",
        "imports); they import only torch and transformers. Pin `revision=` to a commit you have read.",
    ]
    if has_tokenizer:
        lines += [
            "The tokenizer is the backbone's own; its line trusts the same files, since transformers reads this",
            "repository's `config.json`, which names the remote configuration class, before the tokenizer files",
            "(without the flag it asks).",
        ]
    lines.append("")
    return card_text(metadata, lines)


def ensemble_card(folder: Path, manifest: dict, repo_id: str, backbone: str | None, first) -> str:
    """README.md for a pushed probe ensemble: YAML metadata, the probe's own card for the folder (how the members were
    chosen), and how to run it."""
    task = task_of_model(first) or TASKS["ner"]
    metadata = ModelCardData(
        library_name="dwatt",
        base_model=base_model_name(backbone),
        pipeline_tag=task.pipeline_tag,
        tags=TAGS + [task.pipeline_tag, "probe-ensemble"],
        license="apache-2.0",
    )
    about = folder / "README.md"
    body = about.read_text() if about.is_file() else f"# A probe ensemble of {len(manifest['members'])} heads\n"
    return card_text(
        metadata,
        [
            body.rstrip(),
            "",
            "## Use",
            "",
            "With dwatt installed, the ensemble runs as one model (the backbone once, then every head):",
            "",
            "```bash",
            f'dwatt predict {repo_id} "..."',
            "```",
            "",
            f'Each member is a DWAtt checkpoint of its own: `from_pretrained("{repo_id}", subfolder="{manifest["members"][0]}", '
            "trust_remote_code=True)` with the matching `AutoModelFor...` class.",
            "",
        ],
    )
