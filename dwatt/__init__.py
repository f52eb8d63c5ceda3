"""dwatt: Depth-Wise Attention (DWAtt) layer fusion for pretrained encoders.

The model classes live in the two top-level files that travel with every checkpoint (`configuration_dwatt.py`,
`modeling_dwatt.py`); this package re-exports them, registers them with the `Auto` classes, and adds the library
around them: data, few-shot sampling, the feature cache, training and the CLI.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from configuration_dwatt import FUSIONS, POOLINGS, DWAttConfig
from modeling_dwatt import (
    DWAttForMaskedLM,
    DWAttForSequenceClassification,
    DWAttForTokenClassification,
    DWAttModel,
    RobertaDWAttForMaskedLM,
    RobertaDWAttForSequenceClassification,
    RobertaDWAttForTokenClassification,
    count_parameters,
)

from .heads import SharedBackboneHeads  # noqa: E402  (after the model imports it builds on)

AutoConfig.register(DWAttConfig.model_type, DWAttConfig, exist_ok=True)
AutoModel.register(DWAttConfig, DWAttModel, exist_ok=True)
AutoModelForTokenClassification.register(DWAttConfig, RobertaDWAttForTokenClassification, exist_ok=True)
AutoModelForMaskedLM.register(DWAttConfig, RobertaDWAttForMaskedLM, exist_ok=True)
AutoModelForSequenceClassification.register(DWAttConfig, RobertaDWAttForSequenceClassification, exist_ok=True)

__version__ = "0.1.0"

__all__ = [
    "FUSIONS",
    "POOLINGS",
    "DWAttConfig",
    "DWAttForMaskedLM",
    "DWAttForSequenceClassification",
    "DWAttForTokenClassification",
    "DWAttModel",
    "RobertaDWAttForMaskedLM",
    "RobertaDWAttForSequenceClassification",
    "RobertaDWAttForTokenClassification",
    "SharedBackboneHeads",
    "count_parameters",
]
