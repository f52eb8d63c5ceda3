"""DWAtt in transformers' Auto classes (dwatt.auto): registered when a model name is first imported, not by `import dwatt`,
and a checkpoint saved here loads through AutoModelFor... with its dtype and device."""

from pathlib import Path

import torch
from transformers import AutoModelForMaskedLM

from dwatt import RobertaDWAttForMaskedLM

from .conftest import tiny_config

ROOT = Path(__file__).resolve().parents[1]


def test_import_dwatt_and_reading_the_command_line_import_no_torch_and_a_model_name_registers_the_auto_classes():
    """In a fresh interpreter: `import dwatt` and building the CLI's parser leave torch unimported; the first model
    name loaded registers DWAtt, so that AutoConfig knows the model type."""
    import subprocess
    import sys

    script = (
        "import sys, dwatt, dwatt.cli\n"
        "dwatt.cli.build_parser()\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'imported too much'\n"
        "from transformers import AutoConfig\n"
        "from transformers.models.auto.configuration_auto import CONFIG_MAPPING\n"
        "assert 'dwatt' not in CONFIG_MAPPING\n"
        "config_class = dwatt.DWAttConfig\n"
        "assert CONFIG_MAPPING['dwatt'] is config_class and AutoConfig.for_model('dwatt').fusion == 'dwatt'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)


def test_auto_classes_load_locally_registered_checkpoints(tmp_path):
    model = RobertaDWAttForMaskedLM(tiny_config("bert", "concat")).eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path, dtype=torch.float64, device_map="cpu")
    assert isinstance(loaded, RobertaDWAttForMaskedLM) and loaded.dtype == torch.float64
    assert loaded.device.type == "cpu"
    ids = torch.tensor([[5, 9, 12, 7, 30, 6], [8, 11, 5, 21, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(input_ids=ids, attention_mask=mask).logits.float(),
            model(input_ids=ids, attention_mask=mask).logits,
            atol=1e-5,
            rtol=1e-5,
        )
