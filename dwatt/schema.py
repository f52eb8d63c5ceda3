"""Names and sizes that results rows share between the code that writes them (training) and the code that reads them
(the experiment side's tables), kept where both import them without torch."""

ENSEMBLE_SIZES = (3, 5)  # the probe's ensembles of its top layers on dev, averaged
ENSEMBLES_FIELD = "probe_ensembles"  # where a probe group's first run's results hold them

__all__ = ["ENSEMBLES_FIELD", "ENSEMBLE_SIZES"]
