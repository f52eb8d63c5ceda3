"""Many heads on one backbone: equal to each checkpoint alone, one backbone load and pass, refusals, the CLI."""

import io
import json

import pytest
import torch
from transformers import AutoTokenizer

from dwatt import DWAttForMaskedLM, DWAttForTokenClassification
from dwatt.cli import main
from dwatt.serving.shared_heads import SharedBackboneHeads

from .conftest import save_tiny_backbone
from .helpers import trained_like


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    return save_tiny_backbone(tmp_path_factory.mktemp("tiny-bert-mlm"), "bert")


def head_folders(backbone, root) -> dict[str, object]:
    """Head-only and full FE checkpoints of several fusions and both tasks, all on `backbone`."""
    specs = {
        "ner-dwatt": (DWAttForTokenClassification, "dwatt", True, 5),
        "ner-concat-full": (DWAttForTokenClassification, "concat", False, 3),
        "ner-base-plus-n": (DWAttForTokenClassification, "base_plus_n", True, 7),
        "ner-scalar-mix": (DWAttForTokenClassification, "scalar_mix", True, 5),
        "mlm-dwatt": (DWAttForMaskedLM, "dwatt", True, None),
        # heads on one layer: their models run the backbone through that layer only (cut); the shared pass goes deeper
        "ner-base-layer-1": (DWAttForTokenClassification, "base:1", True, 5),
        "ner-base-layer-2-full": (DWAttForTokenClassification, "base:2", False, 4),
    }
    folders = {}
    for seed, (name, (cls, fusion, heads_only, labels)) in enumerate(specs.items()):
        torch.manual_seed(seed)
        fusion, _, layer = fusion.partition(":")
        options = ({"num_labels": labels} if labels else {}) | ({"fused_layers": layer} if layer else {})
        model = trained_like(cls.from_backbone(str(backbone), fusion=fusion, **options))
        assert model.dwatt.is_cut == bool(layer)
        model.save_pretrained(root / name, heads_only=heads_only)
        folders[name] = root / name
    return folders


def inputs():
    torch.manual_seed(9)
    ids = torch.randint(5, 99, (3, 8))
    mask = torch.ones_like(ids)
    mask[1, 5:] = mask[2, 3:] = 0
    return ids, mask


def test_each_head_equals_its_checkpoint_loaded_alone(backbone, tmp_path, monkeypatch):
    folders = head_folders(backbone, tmp_path)
    loads = []
    original = DWAttForTokenClassification.load_pretrained_backbone.__func__

    def counting(cls, name_or_path, load_kwargs, depth=None):
        loads.append(name_or_path)
        return original(cls, name_or_path, load_kwargs, depth)

    monkeypatch.setattr(DWAttForTokenClassification, "load_pretrained_backbone", classmethod(counting))
    shared = SharedBackboneHeads.from_pretrained({name: str(path) for name, path in folders.items()})
    assert loads == [str(backbone)]  # the backbone is loaded once for all heads
    monkeypatch.undo()
    assert all(head.dwatt.backbone is shared.backbone for head in shared.heads.values())
    assert shared.read_layers == [1, 2, 3]
    ids, mask = inputs()
    with torch.no_grad():
        together = shared(input_ids=ids, attention_mask=mask, output_layer_weights=True)
    for name, folder in folders.items():
        cls = DWAttForMaskedLM if name.startswith("mlm") else DWAttForTokenClassification
        alone = cls.from_pretrained(folder).eval()
        with torch.no_grad():
            expected = alone(input_ids=ids, attention_mask=mask, output_layer_weights=True)
        assert (together[name].logits - expected.logits).abs().max() <= 1e-5, name
        if expected.layer_weights is not None:
            assert (together[name].layer_weights - expected.layer_weights).abs().max() <= 1e-5, name


def test_one_backbone_pass_serves_every_head(backbone, tmp_path):
    shared = SharedBackboneHeads.from_pretrained([str(p) for p in head_folders(backbone, tmp_path).values()])
    calls = []
    shared.backbone.register_forward_hook(lambda module, args, output: calls.append(1))
    ids, mask = inputs()
    with torch.no_grad():
        shared(input_ids=ids, attention_mask=mask)
    assert len(calls) == 1


def test_heads_on_different_backbones_are_refused_naming_both_and_the_first_difference(backbone, tmp_path):
    ours = tmp_path / "ours"
    DWAttForTokenClassification.from_backbone(str(backbone), num_labels=5).save_pretrained(ours, heads_only=True)
    wider = save_tiny_backbone(tmp_path / "wider-backbone", "bert", hidden_size=48, intermediate_size=40)
    theirs = tmp_path / "theirs"
    DWAttForTokenClassification.from_backbone(str(wider), num_labels=5).save_pretrained(theirs, heads_only=True)
    with pytest.raises(ValueError, match=rf"{ours}' and '{theirs}' do not share a backbone: hidden_size 32 vs 48"):
        SharedBackboneHeads.from_pretrained([str(ours), str(theirs)])
    fine_tuned = DWAttForTokenClassification.from_backbone(str(backbone), num_labels=5)
    with torch.no_grad():
        next(fine_tuned.dwatt.backbone.parameters()).add_(0.1)  # as after FT
    fine_tuned.save_pretrained(tmp_path / "ft")
    with pytest.raises(ValueError, match=r"carries other backbone weights .*FT"):
        SharedBackboneHeads.from_pretrained([str(ours), str(tmp_path / "ft")])
    # the head-only one named second, or reading fewer layers: its named backbone is still the one checked against
    cut = tmp_path / "cut"
    DWAttForTokenClassification.from_backbone(
        str(backbone), num_labels=5, fusion="base", fused_layers="1"
    ).save_pretrained(cut, heads_only=True)
    for order in ([tmp_path / "ft", ours], [tmp_path / "ft", cut]):
        with pytest.raises(ValueError, match=r"carries other backbone weights .*FT"):
            SharedBackboneHeads.from_pretrained([str(path) for path in order])


def test_cli_predict_with_heads_prints_each_heads_tags_and_writes_jsonl(tiny_backbone, tmp_path, capsys, monkeypatch):
    paths = []
    for seed, labels in ((0, 5), (1, 3)):
        torch.manual_seed(seed)
        model = trained_like(DWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=labels))
        folder = tmp_path / f"head{seed}"
        model.save_pretrained(folder, heads_only=True)
        paths.append(str(folder))
    for path in paths:
        AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(path)
    assert main(["predict", "--heads", ",".join(paths), "peter blackburn rejects", "eu call"]) == 0
    out = capsys.readouterr().out.strip().split("\n\n")
    assert out[0].splitlines()[0] == "word head0 head1"
    assert [line.split()[0] for line in out[0].splitlines()[1:]] == ["peter", "blackburn", "rejects"]
    assert all(len(line.split()) == 3 for line in out[1].splitlines()[1:])
    monkeypatch.setattr("sys.stdin", io.StringIO("\ufeffpeter blackburn\n\neu rejects german call\n"))
    assert main(["predict", "--heads", ",".join(paths), "--jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["words"] for row in rows] == [["peter", "blackburn"], [], ["eu", "rejects", "german", "call"]]
    assert rows[1]["tags"] == {"head0": [], "head1": []}  # the blank line's empty record keeps its place
    rows = rows[::2]
    assert set(rows[0]["tags"]) == {"head0", "head1"} and len(rows[1]["tags"]["head1"]) == 4
    # The same tags as each head alone through `dwatt predict`.
    for path, name in zip(paths, ("head0", "head1")):
        monkeypatch.setattr("sys.stdin", io.StringIO("peter blackburn\neu rejects german call\n"))
        assert main(["predict", path, "--jsonl"]) == 0
        alone = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [row["tags"] for row in alone] == [row["tags"][name] for row in rows]


def test_heads_are_named_by_the_shortest_unique_ending_of_their_paths():
    from dwatt.serving.shared_heads import head_names

    assert head_names(["runs/conll/model", "runs/wikiann-en/model"]) == {
        "conll/model": "runs/conll/model",
        "wikiann-en/model": "runs/wikiann-en/model",
    }
    assert head_names(["a/x", "b/y"]) == {"x": "a/x", "y": "b/y"}
    assert list(head_names(["org/ner-head"])) == ["ner-head"]
    with pytest.raises(ValueError, match="given twice"):
        head_names(["a/x", "a/x"])


def test_cli_heads_saved_as_model_folders_of_two_runs_keep_both(tiny_backbone, tmp_path, capsys):
    paths = []
    for seed, run in enumerate(("conll", "wikiann")):
        torch.manual_seed(seed)
        folder = tmp_path / run / "model"
        trained_like(DWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=5)).save_pretrained(
            folder, heads_only=True
        )
        AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(folder)
        paths.append(str(folder))
    assert (
        main(["predict", "--heads", ",".join(paths), "--jsonl", str(write_lines(tmp_path, ["peter blackburn"]))]) == 0
    )
    assert set(json.loads(capsys.readouterr().out)["tags"]) == {"conll/model", "wikiann/model"}


def write_lines(folder, lines):
    path = folder / "sentences.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_heads_whose_backbone_configs_differ_in_a_forward_field_are_refused_before_any_weight_is_read(
    backbone, tmp_path, monkeypatch
):
    """Two FE heads on backbone folders that differ only in `layer_norm_eps`: head b run on a's backbone would give
    other logits than b alone, so the pair is refused, naming both checkpoints, the field and its two values."""
    other = save_tiny_backbone(tmp_path / "other-eps", "bert", layer_norm_eps=1e-3)
    folders = []
    for name, source in (("a", backbone), ("b", other)):
        torch.manual_seed(0)
        trained_like(DWAttForTokenClassification.from_backbone(str(source), num_labels=5)).save_pretrained(
            tmp_path / name, heads_only=True
        )
        folders.append(str(tmp_path / name))
    a, b = (DWAttForTokenClassification.from_pretrained(f).eval() for f in folders)
    ids, mask = inputs()
    with torch.no_grad():
        b_alone = b(input_ids=ids, attention_mask=mask).logits
        b.dwatt.backbone = a.dwatt.backbone
        assert (b(input_ids=ids, attention_mask=mask).logits - b_alone).abs().max() > 1e-4  # it does change outputs
    # Full checkpoints too (they carry their weights, but not the eps): the same refusal, before any tensor is read.
    b.dwatt.backbone = DWAttForTokenClassification.from_pretrained(folders[1]).dwatt.backbone
    b.save_pretrained(tmp_path / "b-full")
    monkeypatch.setattr(
        "dwatt.serving.shared_heads._checkpoint_tensors", lambda *args: pytest.fail("weights read before the check")
    )
    for pair in (folders, [folders[0], str(tmp_path / "b-full")]):
        with pytest.raises(
            ValueError, match=rf"{pair[0]}' and '{pair[1]}' do not share a backbone: layer_norm_eps 1e-12 vs 0.001"
        ):
            SharedBackboneHeads.from_pretrained(pair)


def test_heads_whose_backbone_configs_differ_only_where_the_forward_cannot_see_are_served_together(backbone, tmp_path):
    """Dropout, the names and paths a config records, its label maps and dtype: none changes an inference forward."""
    from dwatt.serving.shared_heads import backbone_identity, changes_the_forward

    relabelled = save_tiny_backbone(
        tmp_path / "relabelled",
        "bert",
        hidden_dropout_prob=0.3,
        attention_probs_dropout_prob=0.0,
        id2label={0: "x", 1: "y", 2: "z"},
    )
    folders = {}
    for name, source in (("a", backbone), ("b", relabelled)):
        torch.manual_seed(len(folders))
        model = trained_like(DWAttForTokenClassification.from_backbone(str(source), num_labels=5))
        model.save_pretrained(tmp_path / name)  # full: a head-only pair would differ in the backbone's name
        folders[name] = tmp_path / name
    shared = SharedBackboneHeads.from_pretrained({k: str(v) for k, v in folders.items()})
    ids, mask = inputs()
    with torch.no_grad():
        together = shared(input_ids=ids, attention_mask=mask)
        for name, folder in folders.items():
            alone = DWAttForTokenClassification.from_pretrained(folder).eval()(input_ids=ids, attention_mask=mask)
            assert (together[name].logits - alone.logits).abs().max() <= 1e-5, name
    assert not any(
        map(
            changes_the_forward,
            ("_name_or_path", "architectures", "hidden_dropout_prob", "attn_pdrop", "id2label", "dtype"),
        )
    )
    assert all(
        map(
            changes_the_forward,
            (
                "layer_norm_eps",
                "hidden_act",
                "position_embedding_type",
                "rope_parameters",
                "pad_token_id",
                "sliding_window",
            ),
        )
    )
    identity = backbone_identity(shared.heads["a"].config)
    assert list(identity)[:3] == ["model_type", "hidden_size", "num_hidden_layers"] and "layer_norm_eps" in identity


@pytest.mark.parametrize("vectorize", [False, True], ids=["one-after-another", "vmap"])
def test_heads_of_one_architecture_run_as_stacked_copies_and_each_equals_its_checkpoint_alone(
    backbone, tmp_path, vectorize
):
    """Two DWAtt heads (other weights, other keys drawn for the layers, other label names; one head-only, one full)
    and two Concat heads run as copies of one head each (`StackedHeads`), a ScalarMix head alone; every output is
    the checkpoint's own."""
    specs = {
        "dwatt-a": ("dwatt", True, ["O", "B-X", "I-X", "B-Y", "I-Y"]),
        "dwatt-b": ("dwatt", False, ["O", "B-P", "I-P", "B-Q", "I-Q"]),
        "concat-a": ("concat", True, None),
        "concat-b": ("concat", True, None),
        "mix": ("scalar_mix", True, None),
    }
    folders = {}
    for seed, (name, (fusion, heads_only, labels)) in enumerate(specs.items()):
        torch.manual_seed(seed)
        options = {"id2label": dict(enumerate(labels))} if labels else {"num_labels": 3}
        model = trained_like(DWAttForTokenClassification.from_backbone(str(backbone), fusion=fusion, **options))
        model.save_pretrained(tmp_path / name, heads_only=heads_only)
        folders[name] = str(tmp_path / name)
    shared = SharedBackboneHeads.from_pretrained(folders)
    shared.vectorize = vectorize
    assert shared.groups == [["dwatt-a", "dwatt-b"], ["concat-a", "concat-b"], ["mix"]]
    ids, mask = inputs()
    with torch.no_grad():
        together = shared(input_ids=ids, attention_mask=mask, output_layer_weights=True)
    assert list(together) == list(specs)
    # vectorised: the copies as one StackedHeads per group; else each head runs itself
    assert [s is not None for s in shared.stacks()] == [vectorize, vectorize, False]
    for name, folder in folders.items():
        alone = DWAttForTokenClassification.from_pretrained(folder).eval()
        with torch.no_grad():
            expected = alone(input_ids=ids, attention_mask=mask, output_layer_weights=True)
        torch.testing.assert_close(together[name].logits, expected.logits, atol=1e-5, rtol=0, msg=name)
        if expected.layer_weights is not None:
            torch.testing.assert_close(
                together[name].layer_weights, expected.layer_weights, atol=1e-5, rtol=0, msg=name
            )
    # weights changed in place after serving began are the ones served
    with torch.no_grad():
        shared.heads["dwatt-b"].classifier.bias.add_(1.0)
        changed = shared(input_ids=ids, attention_mask=mask)["dwatt-b"].logits
    real = mask.bool()  # padded positions' logits are not the classifier's
    torch.testing.assert_close(changed[real], together["dwatt-b"].logits[real] + 1.0, atol=1e-5, rtol=0)


def test_heads_read_through_the_final_norm_share_a_pass_with_their_like_only(tiny_decoder, tmp_path):
    """A decoder's heads that read their layers through its final norm share one pass and equal their checkpoints
    alone; beside a head that reads them as they leave the layer (other hidden states), they are refused."""
    folders = {}
    for seed, (name, layer, normed) in enumerate([("a", "1", True), ("b", "3", True), ("plain", "1", False)]):
        torch.manual_seed(seed)
        model = DWAttForTokenClassification.from_backbone(
            str(tiny_decoder), fusion="base", num_labels=3, fused_layers=layer, through_final_norm=normed
        )
        trained_like(model).save_pretrained(tmp_path / name)
        folders[name] = str(tmp_path / name)
    shared = SharedBackboneHeads.from_pretrained({name: folders[name] for name in ("a", "b")})
    ids, mask = inputs()
    ids = ids.clamp(max=250)
    with torch.no_grad():
        together = shared(input_ids=ids, attention_mask=mask)
        for name in ("a", "b"):
            alone = DWAttForTokenClassification.from_pretrained(folders[name]).eval()(
                input_ids=ids, attention_mask=mask
            )
            assert (together[name].logits - alone.logits)[mask.bool()].abs().max() <= 1e-5, name
    with pytest.raises(ValueError, match="do not share a backbone: through_final_norm True vs False"):
        SharedBackboneHeads.from_pretrained({name: folders[name] for name in ("a", "plain")})
