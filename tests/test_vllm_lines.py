"""The serving guide's vLLM lines run as written (the block after `<!-- needs: vllm`), in vLLM's CPU build given by
`DWATT_VLLM_PYTHON` (a venv of its own, as the guide sets it up), on a stock export of a tiny text classifier: they
print each text's probabilities, which must be `dwatt predict`'s within 1e-4. Skipped where no such Python is named."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from dwatt import DWAttForSequenceClassification
from dwatt.cli import main

from .helpers import with_random_head

VLLM_PYTHON = os.environ.get("DWATT_VLLM_PYTHON")
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "serving.md"
FOLDER = "runs/which-layer-cls/stock"


def vllm_block() -> str:
    """The guide's Python block that needs vLLM."""
    lines = GUIDE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("<!-- needs: vllm"))
    end = next(i for i in range(start + 2, len(lines)) if lines[i].startswith("```"))
    assert lines[start + 1] == "```python"
    return "\n".join(lines[start + 2 : end]) + "\n"


def test_the_block_names_the_folder_the_guide_exports():
    assert f'"{FOLDER}"' in vllm_block() and f"{FOLDER} --format transformers" in GUIDE.read_text(encoding="utf-8")


TOPICS = {0: "people", 1: "places", 2: "food"}


@pytest.mark.skipif(not VLLM_PYTHON, reason="DWATT_VLLM_PYTHON names no Python with vLLM's CPU build")
@pytest.mark.parametrize(
    "labels, problem_type",
    [(TOPICS, "single_label_classification"), (TOPICS, "multi_label_classification"), ({0: "score"}, "regression")],
)
def test_the_serving_guide_s_vllm_lines_give_dwatt_predict_s_probabilities(
    tiny_backbone, tmp_path, capsys, labels, problem_type
):
    """A softmax over the classes, a sigmoid per label (multi-label) or the number itself (regression): vLLM reads the
    stock config's problem type as `dwatt predict` does."""
    torch.manual_seed(0)
    backbone = tmp_path / "backbone"  # vLLM's CPU attention takes heads of 64 dimensions, not the tiny BERT's 8
    BertModel(BertConfig(vocab_size=16, hidden_size=128, num_hidden_layers=2, num_attention_heads=2)).save_pretrained(
        backbone
    )
    AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(backbone)
    model = DWAttForSequenceClassification.from_backbone(
        str(backbone),
        fusion="base",
        num_labels=len(labels),
        id2label=labels,
        problem_type=problem_type,
        pooling="first",
    )
    with_random_head(model).save_pretrained(tmp_path / "model")
    AutoTokenizer.from_pretrained(backbone).save_pretrained(tmp_path / "model")
    stock = tmp_path / FOLDER
    assert main(["export", str(tmp_path / "model"), str(stock), "--format", "transformers"]) == 0
    text = "peter blackburn rejects brussels"
    block = vllm_block().replace(
        'texts = ["Stocks rallied after the central bank held rates steady ."]', f"texts = [{text!r}]"
    )
    (tmp_path / "serve.py").write_text(block, encoding="utf-8")
    done = subprocess.run(
        [VLLM_PYTHON, "serve.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = next(line for line in done.stdout.splitlines() if line.startswith(text))
    probabilities = json.loads(printed[len(text) :])
    capsys.readouterr()
    (tmp_path / "in.txt").write_text(text + "\n")
    assert main(["predict", str(tmp_path / "model"), "--jsonl", str(tmp_path / "in.txt"), "--quiet"]) == 0
    predicted = json.loads(capsys.readouterr().out)
    expected = (
        [predicted["score"]] if "score" in predicted else [predicted["scores"][name] for name in labels.values()]
    )
    assert max(abs(a - b) for a, b in zip(probabilities, expected)) < 1e-4, (probabilities, expected)
