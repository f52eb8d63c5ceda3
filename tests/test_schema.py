"""The results rows' shared names (dwatt.schema): importable without torch, and the ones training writes with."""

import subprocess
import sys


def test_the_schema_imports_without_torch_and_training_writes_with_it():
    script = "import sys, dwatt.schema; assert 'torch' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", script], check=True)
    from dwatt import schema
    from dwatt.training import probe_ensembles, together

    assert (
        probe_ensembles.ENSEMBLE_SIZES is schema.ENSEMBLE_SIZES and together.ENSEMBLES_FIELD == schema.ENSEMBLES_FIELD
    )
