"""The Hub side: model cards and pushes of head-only (or full) checkpoints through huggingface_hub's upload API.

Network code lives here, in the library, and never in the two remote-code files that travel with checkpoints.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import yaml
from huggingface_hub import HfApi

TAGS = ["dwatt", "layer-fusion"]
TASK_TAGS = {"RobertaDWAttForTokenClassification": "token-classification", "RobertaDWAttForMaskedLM": "fill-mask"}
DATASET_IDS = {"conll2003": "conll2003", "wikiann": "wikiann", "wikitext": "wikitext"}


def _dataset_id(name: str | None) -> str | None:
    if not name:
        return None
    return DATASET_IDS.get(name.split(":", 1)[0], name)


def model_card(model, results: dict | None = None, repo_id: str | None = None, heads_only: bool = True) -> str:
    """
    README.md for a DWAtt checkpoint: YAML metadata (library_name, base_model, tags, datasets, metrics and the
    run's results as model-index), the fusion and training mode, the measured scores, and a usage snippet with
    `trust_remote_code=True`.
    """
    config = model.config
    architecture = type(model).__name__
    pipeline_tag = TASK_TAGS.get(architecture, "token-classification")
    run = (results or {}).get("config", {})
    dataset = _dataset_id(run.get("dataset"))
    metadata: dict = {
        "library_name": "transformers",
        "base_model": config.backbone_name_or_path,
        "pipeline_tag": pipeline_tag,
        "tags": TAGS + [pipeline_tag, f"fusion-{config.fusion}"],
        "license": "apache-2.0",
    }
    if dataset:
        metadata["datasets"] = [dataset]
    scores = {}
    if results and "best_dev_f1" in results:
        scores = {"f1": results["best_dev_f1"]}
        for key in ("precision", "recall", "accuracy"):
            if key in results.get("best_dev_scores", {}):
                scores[key] = results["best_dev_scores"][key]
        metadata["metrics"] = sorted(scores)
        metadata["model-index"] = [
            {
                "name": repo_id or "dwatt-model",
                "results": [
                    {
                        "task": {"type": pipeline_tag},
                        "dataset": {"name": run.get("dataset", "unknown"), "type": dataset or "unknown", "split": "validation"},
                        "metrics": [{"type": name, "value": round(float(value), 4)} for name, value in sorted(scores.items())],
                    }
                ],
            }
        ]
    auto_class = "AutoModelForMaskedLM" if pipeline_tag == "fill-mask" else "AutoModelForTokenClassification"
    mode = {"fe": "FE (frozen backbone; fusion and head trained)", "ft": "FT (everything trained)"}.get(run.get("mode"), "unknown")
    lines = [
        "---",
        yaml.safe_dump(metadata, sort_keys=False).rstrip(),
        "---",
        "",
        f"# {repo_id or 'DWAtt checkpoint'}",
        "",
        f"A `{config.fusion}` layer-fusion model ({architecture}) over the encoder `{config.backbone_name_or_path}`"
        + (f" at revision `{config.backbone_revision}`" if config.backbone_revision else "")
        + ", made with dwatt (Depth-Wise Attention layer fusion, COLING 2024).",
        "",
        f"- Fusion: `{config.fusion}` over {config.num_fused_layers} layers"
        + (f" (d_pos {config.d_pos}, bottlenecks {config.query_bottleneck}/{config.value_bottleneck})" if config.fusion == "dwatt" else ""),
        f"- Training mode: {mode}",
        f"- Checkpoint: {'head-only: fusion module and task head; the backbone is loaded from `base_model`' if heads_only else 'full'}",
    ]
    if results:
        lines.append(
            f"- Data: {run.get('dataset')} with {results.get('num_train_sentences')} training sentences "
            f"(N = {run.get('n_shot')}, seed {results.get('seed')}), {run.get('epochs')} epochs"
        )
        lines += ["", "## Results (validation split, seqeval)", "", "| metric | value |", "|---|---|"]
        lines += [f"| {name} | {100 * float(value):.2f} |" for name, value in sorted(scores.items())]
        lines.append(f"| best epoch | {results.get('best_epoch')} |")
    lines += [
        "",
        "## Usage",
        "",
        "```python",
        f"from transformers import {auto_class}, AutoTokenizer",
        "",
        f'model = {auto_class}.from_pretrained("{repo_id or "path/to/checkpoint"}", trust_remote_code=True)',
        f'tokenizer = AutoTokenizer.from_pretrained("{config.backbone_name_or_path}")',
        "```",
        "",
        "`trust_remote_code=True` runs the two files of this repository, `configuration_dwatt.py` and `modeling_dwatt.py`;",
        "they import only torch and transformers. Pin `revision=` to a commit you have read.",
        "",
    ]
    return "\n".join(lines)


def push_to_hub(
    model,
    repo_id: str,
    *,
    heads_only: bool = True,
    results: dict | None = None,
    tokenizer=None,
    commit_message: str | None = None,
    private: bool | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    api: HfApi | None = None,
) -> str:
    """
    Save `model` (head-only by default) with a generated model card into a temporary folder and upload it as one
    commit with `HfApi.upload_folder`. Returns the commit URL.
    """
    api = api or HfApi(token=token)
    repo_id = api.create_repo(repo_id, private=private, token=token, exist_ok=True).repo_id
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder, heads_only=heads_only)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        if results is not None:
            Path(folder, "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
        Path(folder, "README.md").write_text(model_card(model, results, repo_id, heads_only))
        kind = "head-only" if heads_only else "full"
        message = commit_message or f"Upload {kind} DWAtt checkpoint ({model.config.fusion})"
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            commit_message=message,
            token=token,
            revision=revision,
            create_pr=create_pr,
        )
    return str(getattr(commit, "commit_url", commit))


def push_run(run_dir: str | Path, repo_id: str, **kwargs) -> str:
    """Push a finished `dwatt train` run directory (its `model/` and `results.json`)."""
    import dwatt  # noqa: F401  (registers the Auto classes)
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    run_dir = Path(run_dir)
    results_file, model_dir = run_dir / "results.json", run_dir / "model"
    if not results_file.is_file() or not model_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: not a finished run (needs results.json and model/)")
    results = json.loads(results_file.read_text())
    model = AutoModelForTokenClassification.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return push_to_hub(model, repo_id, results=results, tokenizer=tokenizer, **kwargs)
