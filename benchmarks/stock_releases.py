"""Stock exports of real heads in each transformers release: ids, logits and `pipeline()`'s answers against the dwatt
checkpoint's.

`dwatt export --format transformers` writes a head on one layer as its family's stock `<Family>ForTokenClassification`
or `<Family>ForSequenceClassification`. The tests check that on tiny random backbones in every release CI installs;
this checks it on real heads: each `--head CHECKPOINT=STOCK` (a dwatt checkpoint and its stock export) is run by
dwatt in this process (the checkpoint in fp32, as the export checks it) on the first `--texts` CoNLL-03 test sentences
(a tagger: the words joined by spaces) or AG News evaluation texts (a classifier), one text at a time, through the
tokenizer the export saved; then, for each release folder (`--release`, a `pip install --target` of one
transformers), a process without dwatt (that release first on its path, `trust_remote_code=False`) loads the stock
folder, tokenizes the same texts, runs the stock model, and runs `pipeline("token-classification")` or
`pipeline("text-classification")` on them. Recorded per head and release: whether every text's ids are the ids this
process gave, the largest |logit difference| from the checkpoint's, and how many texts `pipeline()` answers as the
checkpoint's argmax does (a tagger: the same tokens tagged with the same non-O labels; a classifier: the same label).

    python benchmarks/stock_releases.py --head runs/qwen-tagger/model=runs/qwen-tagger/stock \
        --head runs/qwen-cls/model=runs/qwen-cls/stock --release /tmp/dwatt-transformers-4.46.3 ... --texts 20

The committed taggers were trained for the check (`dwatt train --fusion base --layers K [--through-final-norm]
--n-shot 8 --epochs 5 --dev-sentences 100 --lr 1e-2`, then `dwatt export ... --format transformers`) but MiniLM's layer-3
tagger, chosen by `dwatt probe --n-shot 8 --dev-sentences 100 --epochs 5`; the MiniLM and
SmolLM2 classifiers chosen by `dwatt probe --task cls` (benchmarks/vllm_serving.py's), the Qwen classifier trained so
with `--task cls`. Writes `results/stock_releases.json` and `.md` next to this file (or into --output); heads not named
keep their rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import results_files

HERE = Path(__file__).resolve().parent

WITHOUT_DWATT = r"""
import json, sys
import torch, transformers
from transformers import AutoConfig, AutoTokenizer, pipeline
request = json.load(open(sys.argv[1]))
stock, texts, task = request["stock"], request["texts"], request["task"]
auto = transformers.AutoModelForTokenClassification if task == "ner" else transformers.AutoModelForSequenceClassification
model = auto.from_pretrained(stock, trust_remote_code=False).float().eval()
tokenizer = AutoTokenizer.from_pretrained(stock, trust_remote_code=False)
ids, logits, special = [], [], []
with torch.no_grad():
    for text in texts:
        encoded = tokenizer(text, return_tensors="pt", return_special_tokens_mask=True)
        special.append(encoded.pop("special_tokens_mask")[0].tolist())
        ids.append(encoded["input_ids"][0].tolist())
        logits.append(model(**encoded).logits[0].tolist())
runner = pipeline("token-classification" if task == "ner" else "text-classification", model=model, tokenizer=tokenizer)
answers = [runner(text) for text in texts]
if task == "ner":
    answers = [sorted([item["index"], item["entity"]] for item in found) for found in answers]
else:
    answers = [found[0]["label"] if isinstance(found, list) else found["label"] for found in answers]
print(json.dumps({"transformers": transformers.__version__, "ids": ids, "logits": logits, "special": special,
                  "answers": answers}))
"""


def texts_for(task: str, count: int) -> list[str]:
    """The first `count` CoNLL-03 test sentences (words joined by spaces) or AG News evaluation texts."""
    if task == "ner":
        from dwatt.data import load_conll2003

        return [" ".join(words) for words in load_conll2003()["test"]["tokens"] if words][:count]
    from dwatt.data.classification import load_classification_dataset

    return list(load_classification_dataset("ag_news")["validation"]["text"][:count])


def reference(checkpoint: str, stock: str, texts: list[str]) -> dict:
    """The checkpoint's ids and logits (dwatt, fp32) on each text through the stock folder's tokenizer, and the
    answers `pipeline()` should give (`expected`: a tagger's tokens other than O, special tokens left out, as
    `[index, label]`; a classifier's label), with its task, labels and architecture."""
    import torch
    from transformers import AutoTokenizer

    from dwatt.checkpoints import load_checkpoint

    model, _, task = load_checkpoint(checkpoint)
    model.float()
    labels = {int(i): label for i, label in model.config.id2label.items()}
    tokenizer = AutoTokenizer.from_pretrained(stock)
    ids, logits, expected = [], [], []
    with torch.no_grad():
        for text in texts:
            encoded = tokenizer(text, return_tensors="pt", return_special_tokens_mask=True)
            special = encoded.pop("special_tokens_mask")[0].tolist()
            ids.append(encoded["input_ids"][0].tolist())
            logits.append(model(**encoded).logits[0].float())
            chosen = logits[-1].argmax(-1)
            if task == "ner":
                tags = [labels[label] for label in chosen.tolist()]
                expected.append(sorted([i, tag] for i, tag in enumerate(tags) if tag != "O" and not special[i]))
            else:
                expected.append(labels[chosen.item()])
    record = json.loads((Path(stock) / "dwatt_stock_export.json").read_text())
    # what the checkpoint answers, so that a reader sees the check could fail
    answers = f"{sum(map(len, expected))} tokens tagged" if task == "ner" else f"{len(set(expected))} labels"
    return {
        "task": task,
        "architecture": record["architecture"],
        "layer": record["layer"],
        "ids": ids,
        "logits": logits,
        "expected": expected,
        "answers": answers,
    }


def in_release(release: str, stock: str, texts: list[str], task: str, work: Path) -> dict:
    """What a process without dwatt, `release` first on its path, reports of the stock folder (`WITHOUT_DWATT`)."""
    request, script = work / "request.json", work / "without_dwatt.py"
    request.write_text(json.dumps({"stock": str(Path(stock).resolve()), "texts": texts, "task": task}))
    script.write_text(WITHOUT_DWATT)
    done = subprocess.run(
        [sys.executable, str(script), str(request)],
        cwd=work,
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(work / "hf"), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        | {"PYTHONNOUSERSITE": "1", "PYTHONPATH": release, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return {"release": Path(release).name, "error": done.stderr.strip().splitlines()[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(ours: dict, theirs: dict) -> dict:
    """The release's ids, logits and pipeline answers against the checkpoint's."""
    import torch

    if "error" in theirs:
        return {"transformers": theirs["release"], "error": theirs["error"]}
    same_ids = sum(a == b for a, b in zip(ours["ids"], theirs["ids"]))
    difference = max(
        (ref - torch.tensor(got)).abs().max().item()
        for ref, got, a, b in zip(ours["logits"], theirs["logits"], ours["ids"], theirs["ids"])
        if a == b
    )
    return {
        "transformers": theirs["transformers"],
        "same_ids": same_ids,
        "max_abs_logit_difference": difference,
        "pipeline_agrees": sum(a == b for a, b in zip(ours["expected"], theirs["answers"])),
    }


def table(result: dict) -> str:
    """One row per head, one column per release: texts given the same ids, the largest |logit difference|, texts
    `pipeline()` answers as the checkpoint does (the serving guide quotes it)."""
    releases = sorted(
        {row["transformers"] for head in result["heads"].values() for row in head["releases"]},
        key=lambda version: tuple(int(part) for part in version.split(".")[:3] if part.isdigit()),
    )
    lines = [
        "| stock export | texts (the checkpoint's answers) | " + " | ".join(releases) + " |",
        "|---|---|" + "---|" * len(releases),
    ]
    for name, head in result["heads"].items():
        found = {row["transformers"]: row for row in head["releases"]}
        cells = [
            "not run"
            if release not in found
            else f"refused: {found[release]['error']}"
            if "error" in found[release]
            else f"{found[release]['same_ids']}, {found[release]['max_abs_logit_difference']:.1e}, "
            f"{found[release]['pipeline_agrees']}"
            for release in releases
        ]
        lines.append(f"| {name} | {head['texts']} ({head.get('answers', '')}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def markdown(result: dict) -> str:
    return "\n".join(
        [
            "# Stock exports of real heads in each transformers release\n",
            "Each head's stock export (`dwatt export --format transformers`) loaded without dwatt or remote code in "
            "each release, against the dwatt checkpoint (fp32) on the same texts, one at a time; per release: the "
            "texts tokenized to the checkpoint's ids, the largest |logit difference| from its logits, the texts "
            "`pipeline()` answers as its argmax does. Generated by `benchmarks/stock_releases.py`.\n",
            table(result),
            results_files.commands_line(result["commands"]),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head", action="append", required=True, help="CHECKPOINT=STOCK")
    parser.add_argument("--release", action="append", required=True, help="a folder of one transformers release")
    parser.add_argument("--texts", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    import torch

    from dwatt.portable import backbone_folder
    from dwatt.tasks import task_of_architectures

    torch.set_num_threads(args.threads)
    path = Path(args.output) / "stock_releases.json"
    result = json.loads(path.read_text()) if path.exists() else {"benchmark": "stock_releases", "heads": {}}
    result["commands"] = sorted(set(result.get("commands", [])) | {results_files.command("stock_releases.py", argv)})
    result["environment"] = results_files.environment()
    for pair in args.head:
        checkpoint, _, stock = pair.partition("=")
        config = json.loads((Path(checkpoint) / "config.json").read_text())
        task = task_of_architectures(config["architectures"]).name  # the checkpoint's, as load_checkpoint reads it
        texts = texts_for(task, args.texts)
        ours = reference(checkpoint, stock, texts)
        name = f"{ours['architecture']}, {Path(backbone_folder(config['backbone_name_or_path'])).name} layer {ours['layer']}"
        with tempfile.TemporaryDirectory() as work:
            rows = [compare(ours, in_release(release, stock, texts, task, Path(work))) for release in args.release]
        result["heads"][name] = {"texts": len(texts), "answers": ours["answers"], "releases": rows}
        print(name, json.dumps(rows))
    results_files.write(args.output, "stock_releases", result, markdown(result))


if __name__ == "__main__":
    main()
