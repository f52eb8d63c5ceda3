"""The serving choices (dwatt.serving.schemes): each `--quantize` of `dwatt export` names a scheme the int8 graphs
build, for an encoder and a decoder alike, and the command line reads them without torch."""

import subprocess
import sys
from types import SimpleNamespace

import pytest

from dwatt import DWAttConfig
from dwatt.serving.schemes import EXPORT_QUANTIZATIONS, INT8_SCHEMES, schemes_for

from .families import encoder_config


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_every_export_quantization_names_an_int8_scheme(family):
    model = SimpleNamespace(config=DWAttConfig(encoder_config=encoder_config(family), fusion="base"))
    tried = {quantize: schemes_for(quantize, model) for quantize in EXPORT_QUANTIZATIONS}
    assert all(set(schemes) <= set(INT8_SCHEMES) for schemes in tried.values())
    assert tried["int8"] == (("weights", "smooth") if family == "llama" else INT8_SCHEMES)
    assert {tried[f"int8-{scheme}"] for scheme in INT8_SCHEMES} == {(scheme,) for scheme in INT8_SCHEMES}
    with pytest.raises(ValueError, match=r"--quantize: 'int4' is not one of int8, int8-dynamic"):
        schemes_for("int4", model)


def test_the_choices_load_without_torch():
    code = "import sys\nimport dwatt.serving.schemes\nprint('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
