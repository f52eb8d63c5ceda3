"""
The probe's choice kept as models: the chosen head trained again alone into its own folder, cut at its layer, with a
model card that says how it was chosen (`save_chosen`); and the best layers' heads of trial 0 kept as one model that
averages their probabilities (`save_ensemble`, its members stored once each: `store_member`).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from specs_dwatt import layers_to_run

from ..atomic import give_usual_modes, read_json, replace_folder, scratch_folder
from ..execution import Execution
from ..run_config import RunConfig
from ..schema import ranked_members
from ..tasks import TASKS
from ..tokenization import save_tokenizer
from .probe_types import ProbeOutcome, ProbeSettings, layer_span, spec_at
from .store import run_settings
from .sweep import sweep_feature_cache, sweep_output_root


def save_chosen(
    spec, settings: ProbeSettings, outcome: ProbeOutcome, execution: Execution
) -> tuple[Path, dict, str | None]:
    """Train the chosen head of the first trial again, alone, into `<folder>/chosen` with its checkpoint (cut at its
    layer), and write its model card with how it was chosen. Returns the checkpoint folder, the run's results and why
    the head cannot export as a stock transformers model (`stock_refusal`; None where it can)."""
    from ..checkpoints import load_checkpoint
    from ..model_cards import model_card
    from ..serving.stock_export import model_task, stock_refusal

    folder = settings.folder / "chosen"
    config = saving_config(spec, settings, folder)
    model_folder = folder / "model"
    results = _finished(config, folder)  # a probe run again keeps the head it saved for the same choice
    if results is None:
        results = execution.together([config])[0]
    model, _, _ = load_checkpoint(str(model_folder))
    card = model_card(model, results, heads_only=False, has_tokenizer=True)
    (model_folder / "README.md").write_text(
        card.rstrip("\n") + "\n\n" + "\n".join(choice_section(outcome, settings, results)) + "\n"
    )
    return model_folder, results, stock_refusal(model, model_task(model).name)


def saving_config(spec, settings: ProbeSettings, folder: Path) -> RunConfig:
    """`spec`'s run as the probe trains it again alone to keep its model: into `folder`, saved, quiet."""

    cache = sweep_feature_cache(sweep_output_root(settings.store, settings.output_root))
    config = spec.run_config(settings.folder, feature_cache_dir=str(cache), **settings.overrides())
    config.output_dir, config.save_model, config.progress = str(folder), True, False
    return config


def ensemble_members(outcome: ProbeOutcome, size: int) -> list[tuple[int, float]]:
    """The (layer, rate) of the `size` best layers' heads of the probe's first trial, best first: each layer at its
    best rate on dev, the layers ranked by that score, as the probe's ensembles are (`ranked_members`)."""
    trial = outcome.trials[0]
    runs = [(layer, rate) for t, layer, rate in outcome.scores if t == trial]
    if size > len({layer for layer, _ in runs}):
        raise ValueError(
            f"--save-ensemble {size}: the probe has {len({layer for layer, _ in runs})} layers to average"
        )
    ranked = ranked_members(
        [layer for layer, _ in runs], [outcome.scores[trial, layer, rate]["dev"] for layer, rate in runs]
    )
    return [runs[index] for index in ranked[:size]]


def save_ensemble(specs, settings: ProbeSettings, outcome: ProbeOutcome, execution: Execution) -> Path:
    """Train the ensemble's members (`outcome.ensemble_members`) again, together, each into
    `<folder>/ensemble-<size>/layer-<k>` (the deepest whole, cut at its layer, the others head-only: `store_member`),
    and write the folder `dwatt predict` runs as one model (`dwatt.serving.ensemble`): the members best first, and a
    model card."""
    from ..checkpoints import write_ensemble

    trial, members = outcome.trials[0], outcome.ensemble_members
    folder = settings.folder / f"ensemble-{len(members)}"
    configs = [
        saving_config(spec_at(specs, trial, layer, rate), settings, folder / f"layer-{layer}")
        for layer, rate in members
    ]
    pending = [config for config in configs if _finished(config, Path(config.output_dir)) is None]
    if pending:
        execution.together(pending)
    deepest = max(layer for layer, _ in members)
    for config, (layer, _) in zip(configs, members):  # also members an earlier, stopped run saved otherwise
        store_member(Path(config.output_dir) / "model", whole=layer == deepest)
    _, _, metric = outcome.metrics
    about = {
        "task": outcome.task,
        "chosen_on": "dev",
        "trial": trial,
        "layers": [layer for layer, _ in members],
        "learning_rates": [rate for _, rate in members],
    }
    write_ensemble(folder, [f"layer-{layer}/model" for layer, _ in members], about)
    rows = [f"| {layer} | {rate:g} | {outcome.scores[trial, layer, rate]['dev']:.2f} |" for layer, rate in members]
    (folder / "README.md").write_text(
        "\n".join(
            [
                f"# The {len(members)} best layers' heads of a probe, averaged",
                "",
                f"`dwatt probe` trained a head on each of layers {layer_span(outcome.layers)} at learning rates "
                f"{', '.join(f'{r:g}' for r in outcome.rates)}; these are trial {trial}'s heads of the {len(members)} layers "
                f"with the best dev {metric} (each at its best rate), their class probabilities averaged. `dwatt predict` and "
                f"`dwatt evaluate` run this folder as one model: the backbone once, through layer "
                f"{layers_to_run(layer for layer, _ in members)}, then every head; `--quantize int8` runs it int8 on a CPU, and `dwatt "
                f"export` writes it as one ONNX graph.",
                "",
                f"| layer | learning rate | dev {metric} of its head |",
                "|---|---|---|",
                *rows,
                "",
            ]
        )
    )
    return folder


def store_member(model_folder: Path, whole: bool) -> None:
    """An ensemble member's checkpoint as its ensemble keeps it. The member that reads deepest is kept `whole`, cut at
    its layer: it carries the backbone every member shares (`SharedBackboneHeads` runs it once, loaded from that
    member). The others keep their heads only and name the backbone, as a LoRA run's checkpoint does: the folder
    stores the backbone once, not K times, and each member still loads alone, with the backbone it names. A member
    trained beside deeper ones was saved with their layers: it is cut. The folder is replaced whole; one already
    stored as asked is left as it is."""
    from ..checkpoints import load_checkpoint, stored_keys

    stored_whole = not read_json(model_folder / "config.json").get("heads_only")
    model, tokenizer, _ = load_checkpoint(str(model_folder))  # loads only the layers its head reads
    if model.config.backbone_depth is not None:  # recorded deeper: cut it
        model.dwatt.cut_backbone()
    elif stored_whole == whole and (not whole or stored_keys(model_folder) <= set(model.state_dict())):
        return  # as asked, and a whole one stores no layer past its own
    with scratch_folder(model_folder) as staging:
        model.save_pretrained(staging, heads_only=not whole)
        save_tokenizer(tokenizer, staging)
        give_usual_modes(staging)
        replace_folder(staging, model_folder)


def _finished(config: RunConfig, folder: Path) -> dict | None:
    """The results of the run `config` asks for, where `folder` holds it finished with its model."""

    if not (folder / "results.json").is_file() or not (folder / "model" / "config.json").is_file():
        return None
    saved = read_json(folder / "results.json")
    return saved if run_settings(saved.get("config", {})) == run_settings(asdict(config)) else None


def choice_section(outcome: ProbeOutcome, settings: ProbeSettings, results: dict) -> list[str]:
    """The model card's account of how this head was chosen."""
    dev_key, test_key, metric = outcome.metrics
    layer, rate = outcome.chosen
    test = results.get("test_scores", {}).get(test_key)
    dev_size = f"{outcome.dev_size} dev {TASKS[outcome.task].items}" if outcome.dev_size else "the dev split"
    lines = [
        "## How this head was chosen",
        "",
        f"`dwatt probe` trained a head on each of layers {layer_span(outcome.layers)} of the frozen backbone at learning "
        f"rates {', '.join(f'{r:g}' for r in outcome.rates)} ({len(outcome.layers) * len(outcome.rates)} candidates, "
        f"{len(outcome.trials)} trial{'s' * (len(outcome.trials) > 1)}, N = {settings.n_shot}, {settings.epochs} epochs) "
        f"and chose layer {layer} at {rate:g}, the best mean dev {metric} over the trials on {dev_size}.",
        "",
        f"- This head (trial {outcome.trials[0]}): dev {metric} {100 * results[dev_key]:.2f}"
        + ("" if test is None else f", test {metric} {100 * test:.2f}"),
        f"- The model runs layers 1-{layers_to_run([layer])} of the backbone's {outcome.depth_text()}: the layers past it are not "
        "computed and not stored.",
    ]
    if len(outcome.trials) > 1:
        lines.append(
            "- Each trial's own choice: "
            + ", ".join(f"layer {pick[0]} at {pick[1]:g}" for pick in outcome.chosen_per_trial.values())
        )
    return lines


__all__ = [
    "choice_section",
    "ensemble_members",
    "save_chosen",
    "save_ensemble",
    "store_member",
]
