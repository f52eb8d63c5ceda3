"""A text-classification probe on an encoder, given no `--pooling`: its default pooling (the mean over the tokens,
which no stock sequence classifier computes) and the first token's (the family's stock classifier: dense, tanh,
projection), each probed as its own question in its own folder, the pooling chosen on dev and its head copied to
`<folder>/chosen`, where a probe of one pooling keeps it. A tie goes to the first token, whose head serves without
dwatt; a dev lead of the mean is what serving it stock would cost."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from transformers import AutoConfig

from configuration_dwatt import is_decoder_only

from ..execution import Execution
from ..portable import backbone_folder
from ..tasks import TASKS
from .probe_types import ProbeOutcome, ProbeSettings, metrics

STOCK_POOLING = "first"  # what an encoder's stock sequence classifier reads


def poolings_to_try(settings: ProbeSettings) -> list[str | None]:
    """The poolings the probe compares: the one asked for (or the model's default) alone, except on an encoder's text
    task given no `--pooling`, where the default (mean) and the stock classifier's (first) are both probed."""
    if not TASKS[settings.task].pools or settings.pooling is not None:
        return [settings.pooling]
    config = AutoConfig.from_pretrained(backbone_folder(settings.backbone))
    return [None] if is_decoder_only(config) else ["mean", STOCK_POOLING]


def with_pooling(settings: ProbeSettings, pooling: str) -> ProbeSettings:
    """`settings` for one pooling's probe: its figure, model and store under `<folder>/pooling-<pooling>` (a store
    given on purpose with `--results` is shared, the pooling being part of each question)."""
    return replace(settings, pooling=pooling, output=str(settings.folder / f"pooling-{pooling}"))


def dev_score(outcome: ProbeOutcome) -> float:
    """The chosen head's mean dev score."""
    return outcome.mean(*outcome.chosen)


def chosen_pooling(outcomes: dict[str, ProbeOutcome]) -> str:
    """The pooling whose chosen head scores best on dev; a tie goes to the stock classifier's."""
    return max(outcomes, key=lambda pooling: (round(dev_score(outcomes[pooling]), 6), pooling == STOCK_POOLING))


def pooling_lines(outcomes: dict[str, ProbeOutcome]) -> list[str]:
    """Each pooling's choice and dev score, whether its head exports stock, the pooling chosen and the commands that
    serve its head."""
    first = next(iter(outcomes.values()))
    _, _, metric = metrics()[first.task]
    lines = ["poolings compared on dev (each its own probe, above):"]
    for pooling, outcome in outcomes.items():
        layer, rate = outcome.chosen
        served = "exports stock" if outcome.model and outcome.stock_refusal is None else "no stock export"
        lines.append(f"  {pooling}: layer {layer} at {rate:g}, dev {metric} {dev_score(outcome):.2f} ({served})")
    chosen = chosen_pooling(outcomes)
    others = [pooling for pooling in outcomes if pooling != chosen]
    gaps = ", ".join(f"{dev_score(outcomes[chosen]) - dev_score(outcomes[p]):+.2f} over {p}" for p in others)
    lines.append(f"chosen on dev: pooling {chosen} ({gaps}; a tie goes to {STOCK_POOLING}, which serves stock)")
    model = outcomes[chosen].kept
    if model:
        lines.append(f'its head, copied: {model} (dwatt predict {model} "...")')
    stock = outcomes.get(STOCK_POOLING)
    if stock is not None and stock.model and stock.stock_refusal is None:
        lines.append(
            f"served without dwatt: dwatt export {stock.model} OUT --format transformers (pooling "
            f"{STOCK_POOLING}, dev {metric} {dev_score(stock):.2f})"
        )
    return lines


def run_pooling_probes(settings: ProbeSettings, execution: Execution, run_probe, report) -> dict[str, ProbeOutcome]:
    """One probe per pooling to try (`poolings_to_try`), each `report`ed as it ends; their outcomes by pooling."""
    outcomes, poolings = {}, poolings_to_try(settings)
    for pooling in poolings:
        asked = with_pooling(settings, pooling) if len(poolings) > 1 else settings
        outcomes[pooling or ""] = outcome = run_probe(asked, execution)
        report(pooling, outcome, asked)
    chosen = outcomes[chosen_pooling(outcomes)]
    if len(outcomes) > 1 and chosen.model:
        chosen.kept = keep_chosen(Path(chosen.model), settings.folder / "chosen")
    return outcomes


def keep_chosen(model: Path, chosen: Path) -> Path:
    """The chosen pooling's saved head (`<pooling folder>/chosen/model` and what is beside it) copied to `chosen`,
    replacing what an earlier probe kept there; the copied model's folder."""
    if chosen.exists():
        shutil.rmtree(chosen)
    shutil.copytree(model.parent, chosen)
    return chosen / model.name


__all__ = ["STOCK_POOLING", "chosen_pooling", "pooling_lines", "poolings_to_try", "run_pooling_probes"]
