"""Names, sizes and rules that results rows share between the code that writes them (training) and the code that reads
them (the experiment side), kept where both import them without torch."""

from collections.abc import Sequence

ENSEMBLE_SIZES = (3, 5)  # the probe's ensembles of its top layers on dev, averaged
ENSEMBLES_FIELD = "probe_ensembles"  # where a probe group's first run's results hold them


def ranked_members(layers: Sequence[int], scores: Sequence[float | None]) -> list[int]:
    """The copies a probe's layers are represented by, best layer first: for each layer the copy of the best score
    among its learning rates (ties: the first copy), the layers ranked by that score (ties: the first layer met)."""
    best: dict[int, int] = {}
    for index, (layer, score) in enumerate(zip(layers, scores)):
        if score is not None and (layer not in best or score > scores[best[layer]]):
            best[layer] = index
    return sorted(best.values(), key=lambda index: -scores[index])


__all__ = ["ENSEMBLES_FIELD", "ENSEMBLE_SIZES", "ranked_members"]
