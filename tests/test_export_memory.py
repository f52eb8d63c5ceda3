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


def test_a_stock_export_over_its_memory_budget_is_refused_before_it_begins(tiny_backbone, tmp_path, capsys):
    """`dwatt export --format transformers --max-memory`: the stock export holds the weights in float32 and loads the
    folder back (`STOCK_EXPORT_PEAK` of them): over the budget it is refused in one line, nothing written; within
    it, written."""
    from dwatt import DWAttForTokenClassification
    from dwatt.checkpoints import load_checkpoint
    from dwatt.serving.export_memory import EXPORT_MARGIN, STOCK_EXPORT_PEAK, export_memory

    from .helpers import saved_with_tokenizer

    model = DWAttForTokenClassification.from_backbone(
        str(tiny_backbone), num_labels=5, fusion="base", fused_layers="1"
    )
    tagger = saved_with_tokenizer(model, tmp_path / "tagger", tiny_backbone)
    stock = tmp_path / "stock"
    assert main(["export", str(tagger), str(stock), "--format", "transformers", "--max-memory", "64MiB"]) == 2
    err = capsys.readouterr().err
    assert "--max-memory 0.06 GiB: exporting" in err and "give at least" in err and not stock.exists()
    model = load_checkpoint(tagger)[0]
    weights = 4 * sum(t.numel() for t in {id(t): t for t in (*model.parameters(), *model.buffers())}.values())
    assert export_memory(model, None, stock=True) == int(STOCK_EXPORT_PEAK * weights) + EXPORT_MARGIN
    assert main(["export", str(tagger), str(stock), "--format", "transformers", "--max-memory", "8GiB"]) == 0
    assert (stock / "config.json").is_file()
