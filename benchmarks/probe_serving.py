"""Serving a probe-chosen head: the head `dwatt probe` chose and saved (cut at its layer k of L), exported to ONNX and
int8, against transformers' `pipeline("token-classification")` at batch 32 on a plain fp32 tagger over the same
backbone's last layer (`AutoModelForTokenClassification`, a random linear head: speed does not depend on its values),
on CoNLL-03 test sentences.

The same head uncut (the backbone's L layers kept: `backbone_depth=L`, its head weights copied) runs beside it, so
that the cut's own gain is measured in the same run: in PyTorch (fp32, the cut model against the uncut one) and as
exports (int8, cut against uncut; issue 42 bounds the ratio by k/L + 0.15). The exporter's graph optimisation drops
the layers whose outputs nothing reads, so an uncut head's export may already run only layers 1..k: the layers each
graph holds are counted and recorded. In process, each model loaded beforehand, timed in interleaved rounds with the
order rotated; the pipeline at batch 32 runs twice a round under two names, the noise control. Checked, not timed: the
cut model's fp32 tags equal the uncut model's (PyTorch, every sentence), and the cut fp32 export's equal them (every
sentence but float rounding near ties: at least 98%, the share recorded); the int8 export's agreement with fp32 is
recorded. Sizes of the checkpoints and the exports (with their weight files),
cut and uncut.

With `--ensemble` (the folder `dwatt probe --save-ensemble K` wrote), the probe ensemble runs in the same rounds, in
PyTorch and as its fp32 and int8 exports: what averaging the K best layers' heads costs against serving the chosen one.
Checked: its fp32 export tags as it does in PyTorch; its int8 export's agreement with fp32 is recorded.

    dwatt probe --backbone models/all-MiniLM-L6-v2 --n-shot 32 --dev-sentences 1000 --test --save-ensemble 3 \
      --results runs/probe-minilm/results.jsonl
    python benchmarks/probe_serving.py --chosen runs/probe-minilm/chosen/model --ensemble runs/probe-minilm/ensemble-3
    \
      --sentences 2000 --rounds 3

For a backbone of a billion parameters or more on a machine of 24 GiB, `--no-uncut` leaves the uncut twin out (its
model and export hold the backbone whole once more: the cut is then measured only against the pipeline), and
`--backbone-dtype bfloat16` runs the PyTorch settings, the pipeline's plain head too, with the backbone in bf16 (the
exports stay fp32 and int8). The checkpoint through transformers' own `pipeline(..., trust_remote_code=True)` (its
remote code, no dwatt) is timed beside them, and its tags compared with the cut model's.

    python benchmarks/probe_serving.py --chosen runs/probe-qwen/chosen/model --sentences 500 --rounds 2 \
      --no-uncut --backbone-dtype bfloat16

Writes `results/probe_serving_<backbone>.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import results_files
import torch
from transformers import AutoModelForTokenClassification, pipeline

from dwatt import DWAttForTokenClassification
from dwatt.data import load_conll2003, load_tokenizer
from dwatt.portable import backbone_folder, portable_path
from dwatt.serving.onnx_runtime import load_export
from dwatt.serving.prediction import predict_tags
from dwatt.serving.quantization import with_backbone_dtype

HERE = Path(__file__).resolve().parent
BASELINE, CONTROL = "pipeline batch 32", "pipeline batch 32 again"
CUT, UNCUT, CUT_FP32 = "cut export int8", "uncut export int8", "cut export fp32"
CUT_TORCH, UNCUT_TORCH = "cut model fp32 (PyTorch)", "uncut model fp32 (PyTorch)"
REMOTE = "checkpoint through pipeline(trust_remote_code=True) batch 32"
ENSEMBLE, ENSEMBLE_FP32, ENSEMBLE_TORCH = "ensemble export int8", "ensemble export fp32", "ensemble fp32 (PyTorch)"
# An fp32 export whose tags differ from PyTorch's fp32 on more sentences than this is wrong, not rounding: on a 1.5B
# LLM's
# 16 layers, ONNX Runtime's and PyTorch's float sums differ enough to flip a word's tag near a tie now and then.
EXPORT_AGREEMENT_FLOOR = 0.98
# Issue 42's targets against the pipeline: MiniLM's head cut, exported and int8; SmolLM2's head cut (its fastest form
# that tags as fp32 does is what counts: int8 is recorded with its agreement).
TARGETS = {"all-MiniLM-L6-v2": ("cut export int8", 0.35), "SmolLM2-135M-Instruct-q4": ("cut export fp32", 0.25)}


def sentences(count: int) -> list[list[str]]:
    test = load_conll2003()["test"].filter(lambda row: len(row["tokens"]) > 0)
    return list(test["tokens"][:count])


def folder_bytes(folder: Path, names: tuple[str, ...] | None = None) -> int:
    return sum(
        path.stat().st_size for path in folder.iterdir() if path.is_file() and (names is None or path.name in names)
    )


def graph_layers(graph: Path) -> int:
    """How many of the backbone's layers an ONNX graph holds weights of (distinct layer indices in its initializers)."""
    import onnx

    names = [tensor.name for tensor in onnx.load(str(graph), load_external_data=False).graph.initializer]
    return len({match.group(1) for name in names if (match := re.search(r"\.(?:layer|layers|h)\.(\d+)\.", name))})


def export_bytes(folder: Path, graph: str) -> int:
    """A graph's size with its external weights file, where it has one (`model.onnx.data`)."""
    return sum(path.stat().st_size for path in folder.iterdir() if path.name in (graph, graph + ".data"))


def uncut_twin(chosen: Path, folder: Path) -> DWAttForTokenClassification:
    """The chosen head on a model that keeps all L layers, saved full with the tokenizer into `folder`."""
    cut = DWAttForTokenClassification.from_pretrained(chosen)
    config = cut.config
    whole = DWAttForTokenClassification.from_backbone(
        backbone_folder(config.backbone_name_or_path),
        fusion=config.fusion,
        fused_layers=config.fused_layers,
        id2label=config.id2label,
        label2id=config.label2id,
        backbone_depth=config.encoder_config.num_hidden_layers,
    )
    head = {key: value for key, value in cut.state_dict().items() if not key.startswith("dwatt.backbone.")}
    whole.load_state_dict(head, strict=False)
    whole.save_pretrained(folder)
    load_tokenizer(chosen).save_pretrained(folder)
    return whole.eval()


def export(checkpoint: Path, folder: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "dwatt.cli", "export", str(checkpoint), str(folder), "--quantize", "int8"],
        check=True,
        capture_output=True,
    )


def agreement(tags: list[list[str]], reference: list[list[str]]) -> float:
    """The share of sentences `tags` tags as `reference` does, every word alike."""
    return sum(a == b for a, b in zip(tags, reference)) / len(reference)


def named(setting: str, backbone_dtype: str) -> str:
    """A PyTorch setting's name, saying the backbone's dtype where it is not fp32."""
    if backbone_dtype == "float32":
        return setting
    return (
        setting.replace(" fp32", "").replace(" (PyTorch)", "")
        + f", {backbone_dtype} backbone"
        + (" (PyTorch)" if "(PyTorch)" in setting else "")
    )


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def remote_tag_agreement(found: list[list[dict]], words: list[list[str]], tags: list[list[str]]) -> float:
    """The share of sentences the remote-code pipeline tags as the cut model does: each word takes the label the
    pipeline gave the token holding its first character (O where it reported none: the pipeline leaves O tokens
    out), as dwatt labels a word by its first sub-token. The pipeline tokenizes the joined text, dwatt the words: where
    the two tokenizations differ, so can a tag."""
    same = 0
    for entities, sentence, sentence_tags in zip(found, words, tags):
        starts, at = [], 0
        for word in sentence:
            starts.append(at)
            at += len(word) + 1  # the words joined by single spaces
        theirs = []
        for first in starts:
            holding = [e["entity"] for e in entities if e["start"] <= first < e["end"]]
            theirs.append(holding[0] if holding else "O")
        same += theirs == list(sentence_tags)
    return same / len(words)


def ensemble_settings(folder: Path, work: Path, tokenizer, words: list[list[str]]) -> dict:
    """The probe ensemble in `folder`, in PyTorch and exported (fp32 and int8), as timed settings, with what is known
    of it: its members, how deep it runs the backbone, whether its fp32 export tags as it does, its int8 export's
    agreement, and its sizes."""
    from dwatt.checkpoints import member_folders
    from dwatt.serving.ensemble import load_ensemble

    model, _, _ = load_ensemble(folder)
    export(folder, work / "ensemble-onnx")
    graphs = {graph: load_export(work / "ensemble-onnx", graph)[0] for graph in (None, "int8")}
    tags = predict_tags(model, tokenizer, words)
    assert predict_tags(graphs[None], tokenizer, words) == tags, "the ensemble's fp32 export tags differently from it"
    int8_tags = predict_tags(graphs["int8"], tokenizer, words)
    heads = list(model.heads.heads.values())
    return {
        "settings": {
            ENSEMBLE: lambda: predict_tags(graphs["int8"], tokenizer, words),
            ENSEMBLE_FP32: lambda: predict_tags(graphs[None], tokenizer, words),
            ENSEMBLE_TORCH: lambda: predict_tags(model, tokenizer, words),
        },
        "layers": [head.config.read_layer for head in heads],
        "depth": max(head.config.run_depth for head in heads),
        "export_tags_equal_fp32": True,
        "int8_tag_agreement": round(sum(a == b for a, b in zip(int8_tags, tags)) / len(words), 4),
        "checkpoint_bytes": sum(folder_bytes(path, ("model.safetensors",)) for path in member_folders(folder)),
        "export_bytes": {
            graph: export_bytes(work / "ensemble-onnx", file)
            for graph, file in (("fp32", "model.onnx"), ("int8", "model_int8.onnx"))
        },
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chosen", required=True, help="the checkpoint `dwatt probe` saved (OUTPUT/chosen/model)")
    parser.add_argument(
        "--ensemble", help="a probe ensemble's folder (OUTPUT/ensemble-K), timed beside the chosen head"
    )
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--output", default=str(HERE / "results"))
    parser.add_argument("--no-uncut", action="store_true", help="leave the uncut twin out (a large backbone)")
    parser.add_argument(
        "--backbone-dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="the dtype of the backbone in the PyTorch settings (the exports stay fp32 and int8)",
    )
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    chosen = Path(args.chosen)
    words = sentences(args.sentences)
    texts = [" ".join(sentence) for sentence in words]
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        cut = DWAttForTokenClassification.from_pretrained(chosen).eval()
        config = cut.config
        depth, total = config.run_depth, config.encoder_config.num_hidden_layers
        backbone = backbone_folder(config.backbone_name_or_path)
        name = Path(portable_path(config.backbone_name_or_path)).name
        kinds = ("cut",) if args.no_uncut else ("cut", "uncut")
        tokenizer = load_tokenizer(chosen)
        export(chosen, work / "cut-onnx")
        exports = {"cut": {graph: load_export(work / "cut-onnx", graph)[0] for graph in (None, "int8")}}
        # Checks: the cut fp32 export tags as the cut model does; the cut model as the uncut one (fp32, PyTorch: a
        # checkpoint saved in bf16, as an LLM's is, loads in bf16, whose tags may differ from fp32's on some
        # sentences).
        cut_tags = predict_tags(with_backbone_dtype(cut, "float32"), tokenizer, words)
        export_agreement = agreement(predict_tags(exports["cut"][None], tokenizer, words), cut_tags)
        assert export_agreement >= EXPORT_AGREEMENT_FLOOR, (
            f"the cut fp32 export tags {100 * export_agreement:.1f}% of the sentences as the cut model does"
        )
        int8_agreement = agreement(predict_tags(exports["cut"]["int8"], tokenizer, words), cut_tags)
        if not args.no_uncut:
            whole = uncut_twin(chosen, work / "uncut")
            differing = sum(
                a != b for a, b in zip(cut_tags, predict_tags(with_backbone_dtype(whole, "float32"), tokenizer, words))
            )
            assert differing == 0, f"{differing} sentences tagged differently by the cut model"
            export(work / "uncut", work / "uncut-onnx")
            exports["uncut"] = {graph: load_export(work / "uncut-onnx", graph)[0] for graph in (None, "int8")}
            with_backbone_dtype(whole, args.backbone_dtype)
        cut_torch, uncut_torch, remote_name = (
            named(what, args.backbone_dtype) for what in (CUT_TORCH, UNCUT_TORCH, REMOTE)
        )
        with_backbone_dtype(cut, args.backbone_dtype)
        timed_tags = predict_tags(cut, tokenizer, words)  # the cut model in the dtype it is timed in
        dtype_agreement = agreement(timed_tags, cut_tags)
        plain = pipeline(
            "token-classification",
            model=AutoModelForTokenClassification.from_pretrained(
                backbone, num_labels=len(config.id2label), dtype=getattr(torch, args.backbone_dtype)
            ),
            tokenizer=load_tokenizer(backbone),
            device="cpu",
        )
        remote = pipeline(
            "token-classification",
            model=str(chosen),
            trust_remote_code=True,
            device="cpu",
            dtype=getattr(torch, args.backbone_dtype),
        )
        remote_agreement = remote_tag_agreement(remote(texts, batch_size=32), words, timed_tags)
        settings = {
            BASELINE: lambda: plain(texts, batch_size=32),
            CUT: lambda: predict_tags(exports["cut"]["int8"], tokenizer, words),
            CUT_FP32: lambda: predict_tags(exports["cut"][None], tokenizer, words),
            cut_torch: lambda: predict_tags(cut, tokenizer, words),
            remote_name: lambda: remote(texts, batch_size=32),
        }
        if not args.no_uncut:
            settings |= {
                UNCUT: lambda: predict_tags(exports["uncut"]["int8"], tokenizer, words),
                uncut_torch: lambda: predict_tags(whole.eval(), tokenizer, words),
            }
        ensemble = ensemble_settings(Path(args.ensemble), work, tokenizer, words) if args.ensemble else {}
        settings |= ensemble.pop("settings", {})
        timings = results_files.interleaved_timings(settings, args.rounds, control=BASELINE, warmup=args.warmup)
        median = timings["median"]
        head_only = work / "head-only"
        DWAttForTokenClassification.from_pretrained(chosen).save_pretrained(head_only, heads_only=True)
        sizes = {
            "checkpoint_bytes": {
                "cut": folder_bytes(chosen, ("model.safetensors",)),
                "head_only": folder_bytes(head_only, ("model.safetensors",)),
                **({} if args.no_uncut else {"uncut": folder_bytes(work / "uncut", ("model.safetensors",))}),
            },
            "export_bytes": {
                kind: {
                    graph: export_bytes(work / f"{kind}-onnx", file)
                    for graph, file in (("fp32", "model.onnx"), ("int8", "model_int8.onnx"))
                }
                for kind in kinds
            },
            "graph_layers": {kind: graph_layers(work / f"{kind}-onnx" / "model.onnx") for kind in kinds},
        }
    ratio = {key: value / median[BASELINE] for key, value in median.items()}
    cut_vs_uncut = None if args.no_uncut else median[CUT] / median[UNCUT]
    torch_cut_vs_uncut = None if args.no_uncut else median[cut_torch] / median[uncut_torch]
    bound = depth / total + 0.15
    result = {
        "backbone": name,
        "layer": config.read_layer,
        "depth": depth,
        "backbone_layers": total,
        "sentences": len(words),
        "rounds": args.rounds,
        "command": results_files.command("probe_serving.py", argv),
        "environment": results_files.environment(torch.device("cpu")),
        "median_seconds": {key: round(value, 3) for key, value in median.items()},
        "ratio_to_pipeline": {key: round(value, 3) for key, value in ratio.items()},
        "noise_control": round(timings["noise_control"], 3),
        "cut_vs_uncut": rounded(cut_vs_uncut),
        "cut_vs_uncut_torch": rounded(torch_cut_vs_uncut),
        "cut_vs_uncut_bound": round(bound, 3),
        "backbone_dtype": args.backbone_dtype,
        "remote_code_tag_agreement": round(remote_agreement, 4),
        "backbone_dtype_tag_agreement": round(dtype_agreement, 4),
        "pipeline_target": TARGETS.get(name),
        "tags_equal_uncut_fp32": None if args.no_uncut else True,
        "int8_tag_agreement": round(int8_agreement, 4),
        "fp32_export_tag_agreement": round(export_agreement, 4),
        **sizes,
        **({"ensemble": ensemble} if ensemble else {}),
    }
    results_files.write(args.output, f"probe_serving_{name}", result, readme_text(result))
    return result


def readme_text(result: dict) -> str:
    """The Markdown of one backbone's result: the timings against the pipeline, the checks and the sizes."""
    median, ratio, sizes = result["median_seconds"], result["ratio_to_pipeline"], result
    target, bound, mib = result["pipeline_target"], result["cut_vs_uncut_bound"], 1 << 20
    environment = result["environment"]
    lines = [
        f"**{result['backbone']}, the probe's layer {result['layer']} of {result['backbone_layers']}** "
        f"(`{result['command']}`; {environment['device_name']}, torch {environment['torch']}, int8 kernels exact on "
        f"8-bit activations: {environment.get('int8_8bit_activations_exact')}): {result['sentences']} CoNLL-03 test "
        f"sentences, median of {result['rounds']} interleaved rounds; the pipeline timed twice a round, the noise "
        f"control: **{result['noise_control']:.2f}**.",
        "",
        "| what | seconds | × pipeline batch 32 |",
        "|---|---:|---:|",
        *[f"| {key} | {median[key]:.2f} | {ratio[key]:.2f} |" for key in median],
        "",
        f"- The cut int8 export takes **{ratio[CUT]:.2f}×** the pipeline's time, the cut fp32 export "
        f"**{ratio[CUT_FP32]:.2f}×**"
        + (
            f" (target for the {target[0]} ≤ {target[1]}: {'met' if ratio[target[0]] <= target[1] else 'not met'})."
            if target
            else "."
        ),
    ]
    export_share = result.get("fp32_export_tag_agreement", 1.0)
    export_words = (
        "" if export_share == 1.0 else f" but {100 * (1 - export_share):.1f}% of them (float rounding near ties)"
    )
    if result["cut_vs_uncut"] is not None:
        lines += [
            f"- The cut itself, against the same head uncut: in PyTorch **{result['cut_vs_uncut_torch']:.2f}×** (k/L + "
            f"0.15 = {bound:.2f}: {'within' if result['cut_vs_uncut_torch'] <= bound else 'above'}); as int8 exports "
            f"**{result['cut_vs_uncut']:.2f}×** ({'within' if result['cut_vs_uncut'] <= bound else 'above'} that "
            f"bound): the exported graphs hold {result['graph_layers']['cut']} and {result['graph_layers']['uncut']} of "
            f"the {result['backbone_layers']} layers"
            + (
                ", the exporter having dropped the uncut head's unread layers itself."
                if result["graph_layers"]["uncut"] < result["backbone_layers"]
                else "."
            ),
            "- Tags: the cut model's equal the uncut model's on every sentence (fp32, PyTorch), and so do the cut fp32 "
            f"export's{export_words}; the int8 export tags {100 * result['int8_tag_agreement']:.1f}% of the sentences as fp32 does"
            + (
                ": too far from fp32 to serve (dynamic int8 of this backbone's activations loses the tags)."
                if result["int8_tag_agreement"] < 0.5
                else "."
            ),
        ]
    else:
        lines.append(
            f"- Tags: the cut fp32 export's equal the cut model's (fp32, PyTorch) on every sentence{export_words}; "
            "the int8 export tags "
            f"{100 * result['int8_tag_agreement']:.1f}% of the sentences as fp32 does. The uncut twin was left out "
            f"(`--no-uncut`); the cut export holds {result['graph_layers']['cut']} of the {result['backbone_layers']} "
            "layers."
        )
    if result.get("backbone_dtype", "float32") != "float32" and "backbone_dtype_tag_agreement" in result:
        lines.append(
            f"- With its backbone in {result['backbone_dtype']}, the cut model tags "
            f"{100 * result['backbone_dtype_tag_agreement']:.1f}% of the sentences as it does in fp32."
        )
    if "remote_code_tag_agreement" in result:
        lines.append(
            f"- The checkpoint through transformers' `pipeline(..., trust_remote_code=True)` (its own remote code, no "
            f"dwatt) tags {100 * result['remote_code_tag_agreement']:.1f}% of the sentences as the cut model does (a "
            "word: the label of the token holding its first character; the pipeline tokenizes the joined text)."
        )
    checkpoints, exports = sizes["checkpoint_bytes"], sizes["export_bytes"]
    kinds = [kind for kind in ("cut", "uncut") if kind in exports]

    def mib_of(values: list[int]) -> str:
        return " / ".join(f"{value / mib:.1f}" for value in values)

    head_only = f" (head-only: {checkpoints['head_only'] / 1024:.1f} KiB)" if "head_only" in checkpoints else ""
    lines.append(
        f"- Sizes ({' / '.join(kinds)}): checkpoint {mib_of([checkpoints[kind] for kind in kinds])} MiB{head_only}; "
        f"export fp32 {mib_of([exports[kind]['fp32'] for kind in kinds])} MiB, "
        f"int8 {mib_of([exports[kind]['int8'] for kind in kinds])} MiB."
    )
    ensemble = result.get("ensemble")
    if ensemble:
        lines.append(
            f"- The probe ensemble (the heads of layers {', '.join(map(str, ensemble['layers']))}, their probabilities "
            f"averaged; the backbone run through layer {ensemble['depth']}): its int8 export takes "
            f"**{ratio[ENSEMBLE]:.2f}×** the pipeline's time and **{median[ENSEMBLE] / median[CUT]:.2f}×** the chosen "
            f"head's cut int8 export's; in PyTorch fp32 {median[ENSEMBLE_TORCH] / median[CUT_TORCH]:.2f}× the cut "
            f"model's. Its fp32 export tags as it does in PyTorch on every sentence; its int8 export tags "
            f"{100 * ensemble['int8_tag_agreement']:.1f}% of the sentences as fp32 does. Sizes: checkpoints "
            f"{ensemble['checkpoint_bytes'] / mib:.1f} MiB (its members together), export fp32 "
            f"{ensemble['export_bytes']['fp32'] / mib:.1f} MiB, int8 {ensemble['export_bytes']['int8'] / mib:.1f} MiB."
        )
    return "\n".join(lines + [""])


if __name__ == "__main__":
    main()
