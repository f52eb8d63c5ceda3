"""dwatt: Depth-Wise Attention (DWAtt) layer fusion for pretrained encoders.

The model classes live in the top-level files that travel with every checkpoint (`configuration_dwatt.py`,
`modeling_dwatt.py` and the siblings it imports); this package re-exports them and adds the library around them: data,
few-shot sampling, the
feature cache, training, serving and the CLI.

The re-exported names load on first use (PEP 562), and the first of the model names to load registers DWAtt with
transformers' Auto classes (`register_auto_classes`): `import dwatt` alone imports neither torch nor transformers'
models, so that the command line and the ONNX runtime start quickly.
"""

from importlib import import_module

from specs_dwatt import FUSIONS, POOLINGS

from .auto import register_auto_classes

# Where each lazily loaded public name lives.
_MODEL_NAMES = {
    "DWAttConfig": "configuration_dwatt",
    **{
        name: "modeling_dwatt"
        for name in (
            "DWAttForMaskedLM",
            "DWAttForSequenceClassification",
            "DWAttForTokenClassification",
            "DWAttModel",
            "RobertaDWAttForMaskedLM",
            "RobertaDWAttForSequenceClassification",
            "RobertaDWAttForTokenClassification",
            "count_parameters",
        )
    },
    "SharedBackboneHeads": "dwatt.serving.shared_heads",
}


def __getattr__(name: str):
    if name not in _MODEL_NAMES:
        raise AttributeError(f"module 'dwatt' has no attribute {name!r}")
    register_auto_classes()
    value = getattr(import_module(_MODEL_NAMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODEL_NAMES})


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
    "register_auto_classes",
]
