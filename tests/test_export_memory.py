"""`dwatt.serving.export_memory`: what an export takes in memory, refused over its budget before it begins, and
PyTorch's weights let go."""

import torch

from dwatt.cli import main


def test_an_export_over_its_memory_budget_is_refused_before_it_begins(checkpoints, tmp_path, capsys, monkeypatch):
    """`--max-memory`: an export that would take more (about twice the weights in float32, `export_memory`) is refused
    in one line that says how much it needs, nothing written; without a budget, the memory available bounds it."""
    import psutil

    from dwatt.checkpoints import load_checkpoint
    from dwatt.serving.export_memory import EXPORT_PEAK, export_memory

    assert main(["export", str(checkpoints["ner"]), str(tmp_path / "onnx"), "--max-memory", "64MiB"]) == 2
    err = capsys.readouterr().err
    assert "--max-memory 0.06 GiB: exporting" in err and "give at least" in err and not (tmp_path / "onnx").exists()
    model = load_checkpoint(checkpoints["ner"])[0]
    parameters = 4 * sum(p.numel() for p in {id(p): p for p in (*model.parameters(), *model.buffers())}.values())
    assert export_memory(model, None) == int(EXPORT_PEAK[False] * parameters) + parameters + (1 << 30)
    assert export_memory(model, "int8") > export_memory(model, None)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("Memory", (), {"available": 1 << 20})())
    assert main(["export", str(checkpoints["ner"]), str(tmp_path / "onnx")]) == 2
    assert "and 0.00 GiB is available" in capsys.readouterr().err and not (tmp_path / "onnx").exists()


def test_release_weights_moves_a_model_to_the_meta_device():
    from dwatt.serving.export_memory import release_weights

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    release_weights(model)
    assert all(tensor.is_meta for tensor in (*model.parameters(), *model.buffers()))
