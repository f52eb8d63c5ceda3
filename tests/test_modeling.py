"""The model side: parameter budgets, every fusion x task x backbone, masking, caching input, checkpoints."""

import json
import textwrap

import pytest
import torch
from transformers import AutoModelForTokenClassification, RobertaConfig

from dwatt import FUSIONS, DWAttConfig, RobertaDWAttForMaskedLM, RobertaDWAttForTokenClassification
from dwatt.defaults import ROBERTA_LARGE_SHAPE
from modeling_dwatt import DWAttForTokenClassification, count_parameters
from specs_dwatt import FUSION_SPECS, layers_to_run

from .conftest import ENCODERS, run_without_dwatt, tiny_config

TASKS = {"token": RobertaDWAttForTokenClassification, "mlm": RobertaDWAttForMaskedLM}
PAPER_TABLE_2 = {"dwatt": 26.38e6, "concat": 25.18e6, "base_plus_n": 25.19e6}


def fusion_parameters(encoder_config, fusion: str) -> tuple[int, int]:
    with torch.device("meta"):
        model = RobertaDWAttForTokenClassification(
            DWAttConfig(encoder_config=encoder_config, fusion=fusion, num_labels=9)
        )
    return count_parameters(model.dwatt.fusion), model.config.num_extra_layers


@pytest.mark.parametrize("fusion", sorted(PAPER_TABLE_2))
def test_added_parameters_match_paper_table_2_on_roberta_large(fusion):
    added, num_extra_layers = fusion_parameters(RobertaConfig(**ROBERTA_LARGE_SHAPE), fusion)
    assert num_extra_layers == 2
    assert abs(added - PAPER_TABLE_2[fusion]) / PAPER_TABLE_2[fusion] < 0.005, added


def test_base_adds_nothing_and_roberta_base_gets_one_extra_layer():
    assert fusion_parameters(RobertaConfig(**ROBERTA_LARGE_SHAPE), "base")[0] == 0
    base_shape = dict(
        ROBERTA_LARGE_SHAPE, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
    )
    added, num_extra_layers = fusion_parameters(RobertaConfig(**base_shape), "base_plus_n")
    assert num_extra_layers == 1
    assert added == 7087872  # one RoBERTa-base layer


def make_batch(vocab: int = 99, pad_id: int = 1):
    """Two sentences of 6 and 4 real tokens, padded to 6."""
    ids = torch.randint(5, vocab, (2, 6))
    mask = torch.ones_like(ids)
    ids[1, 4:], mask[1, 4:] = pad_id, 0
    return ids, mask


@pytest.mark.parametrize("encoder", sorted(ENCODERS))
@pytest.mark.parametrize("task", sorted(TASKS))
@pytest.mark.parametrize("fusion", FUSIONS)
def test_forward_backward_every_fusion_task_backbone(encoder, task, fusion):
    config = tiny_config(encoder, fusion)
    model = TASKS[task](config)
    ids, mask = make_batch(pad_id=config.encoder_config.pad_token_id)
    labels = torch.randint(0, 5, ids.shape).masked_fill(mask == 0, -100)
    out = model(input_ids=ids, attention_mask=mask, labels=labels, output_layer_weights=True)
    width = 5 if task == "token" else config.encoder_config.vocab_size
    assert out.logits.shape == (2, 6, width)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    fusion_grads = [p.grad for p in model.dwatt.fusion.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in fusion_grads)
    if FUSION_SPECS[fusion].weighs_layers:
        assert out.layer_weights.shape == (2, 6, 3)  # a distribution over the layers where a token is labelled
        torch.testing.assert_close(out.layer_weights.sum(-1), (labels != -100).float())
    else:
        assert out.layer_weights is None


@pytest.mark.parametrize("encoder", sorted(ENCODERS))
@pytest.mark.parametrize("fusion", FUSIONS)
def test_padding_and_batch_order_do_not_change_outputs(encoder, fusion):
    config = tiny_config(encoder, fusion)
    model = RobertaDWAttForTokenClassification(config).eval()
    pad = config.encoder_config.pad_token_id
    ids, mask = make_batch(pad_id=pad)
    with torch.no_grad():
        batched = model(input_ids=ids, attention_mask=mask).logits
        alone = model(input_ids=ids[1:, :4], attention_mask=mask[1:, :4]).logits
        longer_pad = torch.cat([ids, torch.full((2, 3), pad)], dim=1)
        longer_mask = torch.cat([mask, torch.zeros(2, 3, dtype=mask.dtype)], dim=1)
        padded_more = model(input_ids=longer_pad, attention_mask=longer_mask).logits
        swapped = model(input_ids=ids.flip(0), attention_mask=mask.flip(0)).logits
    torch.testing.assert_close(batched[1, :4], alone[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(padded_more[:, :6][mask.bool()], batched[mask.bool()], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(swapped.flip(0)[mask.bool()], batched[mask.bool()], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("encoder", ["roberta", "mpnet"])
@pytest.mark.parametrize("fusion", FUSIONS)
def test_precomputed_hidden_states_give_identical_logits(encoder, fusion):
    model = RobertaDWAttForTokenClassification(tiny_config(encoder, fusion)).eval()
    ids, mask = make_batch(pad_id=model.config.encoder_config.pad_token_id)
    with torch.no_grad():
        direct = model(input_ids=ids, attention_mask=mask)
        states = model.dwatt.backbone(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        from_all = model(backbone_hidden_states=torch.stack(states, 1), attention_mask=mask)
        from_tuple = model(backbone_hidden_states=states, attention_mask=mask)
        needed = torch.stack([states[i] for i in model.dwatt.fused_layer_indices], 1)
        from_needed = model(backbone_hidden_states=needed, attention_mask=mask)
    for cached in (from_all, from_tuple, from_needed):
        assert torch.equal(cached.logits, direct.logits)


def test_wrong_number_of_precomputed_layers_names_the_shapes():
    model = RobertaDWAttForTokenClassification(tiny_config()).eval()
    with pytest.raises(ValueError, match=r"has 2 layers .*expects all 4 hidden states .* exactly the 3"):
        model(backbone_hidden_states=torch.zeros(1, 2, 5, 32))
    with pytest.raises(ValueError, match="needs `input_ids`"):
        model()


def test_include_embeddings_fuses_one_more_layer():
    model = RobertaDWAttForTokenClassification(tiny_config(include_embeddings=True))
    ids, mask = make_batch()
    assert model(input_ids=ids, attention_mask=mask, output_layer_weights=True).layer_weights.shape[-1] == 4


def test_static_keys_are_a_saved_buffer_not_a_parameter():
    model = RobertaDWAttForTokenClassification(tiny_config())
    names = dict(model.named_parameters())
    assert "dwatt.fusion.layer_positions" not in names
    positions = model.state_dict()["dwatt.fusion.layer_positions"]
    assert positions.shape == (3, 24) and 0 <= positions.min() and positions.max() <= 1
    assert "layers=3, hidden=32, value_bottleneck=16, d_pos=24" in repr(model.dwatt.fusion)


def test_value_mlps_match_a_per_layer_reference():
    """The batched value computation equals a plain loop of per-layer MLP + LayerNorm."""
    fusion = RobertaDWAttForTokenClassification(tiny_config()).dwatt.fusion
    with torch.no_grad():
        for parameter in fusion.parameters():
            parameter.normal_()
        layers = torch.randn(2, 3, 5, 32)
        batched = fusion.values(layers).view(3, 2, 5, 32)
        for n in range(3):
            up = layers[:, n] @ fusion.value_up_weight[n] + fusion.value_up_bias[n]
            up = torch.nn.functional.gelu(up)
            up = torch.nn.functional.layer_norm(
                up, (16,), fusion.value_mid_norm_weight[n, 0], fusion.value_mid_norm_bias[n, 0]
            )
            down = up @ fusion.value_down_weight[n] + fusion.value_down_bias[n]
            reference = torch.nn.functional.layer_norm(
                down, (32,), fusion.value_norm_weight[n, 0], fusion.value_norm_bias[n, 0]
            )
            torch.testing.assert_close(batched[n], reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"fusion": "dwat"}, "unknown fusion 'dwat'"),
        ({"value_bottleneck": 0}, "`value_bottleneck` must be a number in \\(0, 1\\]"),
        ({"query_bottleneck": 1.5}, "`query_bottleneck` must be a number in \\(0, 1\\]"),
        ({"d_pos": 0}, "`d_pos` must be an integer >= 1"),
        ({"num_extra_layers": -1}, "`num_extra_layers` must be an integer >= 0"),
        ({"classifier_dropout": 1.0}, "`classifier_dropout` must be in \\[0, 1\\)"),
        ({"sequence_head": "mlp"}, "unknown sequence_head 'mlp'; expected one of dense_tanh, linear"),
        ({"encoder_config": {"hidden_size": 8}}, "has no `model_type`"),
        ({"encoder_config": {"model_type": "no-such-model"}}, "unknown encoder model_type 'no-such-model'"),
        # a checkpoint of a family the running transformers lacks: one line naming the release that saved it
        (
            {"encoder_config": {"model_type": "no-such-model"}, "transformers_version": "9.1.0"},
            r"^DWAttConfig: .* transformers [\d.]+\S* does not have this backbone family; the checkpoint was saved with "
            r"transformers 9.1.0, which has it$",
        ),
    ],
)
def test_bad_config_values_are_refused_with_the_key_named(kwargs, message):
    kwargs.setdefault("encoder_config", ENCODERS["roberta"]())
    with pytest.raises(ValueError, match=message):
        DWAttConfig(**kwargs)


def test_config_round_trips_through_json(tmp_path):
    config = tiny_config("mpnet", "base_plus_n", num_extra_layers=2, d_pos=7)
    config.save_pretrained(tmp_path)
    stored = json.loads((tmp_path / "config.json").read_text())
    assert stored["encoder_config"]["model_type"] == "mpnet"
    assert stored["auto_map"]["AutoConfig"] == "configuration_dwatt.DWAttConfig"
    loaded = DWAttConfig.from_pretrained(tmp_path)
    assert loaded.to_dict() == config.to_dict()


@pytest.mark.parametrize(
    "rope, legacy",
    [
        ({"rope_type": "default", "rope_theta": 1e5}, {"rope_theta": 1e5}),
        (
            {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5, "partial_rotary_factor": 0.5},
            {"rope_theta": 5e5, "rope_scaling": {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}}
            | {"partial_rotary_factor": 0.5},
        ),
        (  # Gemma 3: one base per attention type, the sliding window's under 4.x's `rope_local_base_freq`
            {
                "full_attention": {"rope_type": "default", "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            },
            {"rope_theta": 1e6, "rope_local_base_freq": 1e4},
        ),
    ],
)
def test_the_rotary_settings_are_written_under_the_keys_transformers_4_reads_too(rope, legacy):
    """transformers 5 writes the rotary base in `rope_parameters` alone; 4.x reads `rope_theta` (and `rope_scaling`,
    `partial_rotary_factor`, Gemma 3's `rope_local_base_freq`) and runs its default base without them."""
    from configuration_dwatt import with_legacy_rope

    config = {"model_type": "llama", "rope_parameters": rope}
    assert with_legacy_rope(config) == legacy | config
    assert with_legacy_rope(config | {"rope_theta": 7.0})["rope_theta"] == 7.0  # a key it holds stays
    assert with_legacy_rope({"model_type": "bert"}) == {"model_type": "bert"}  # no rotary settings, nothing added


def test_a_decoder_checkpoint_s_config_carries_its_rotary_base_for_transformers_4(tmp_path):
    from transformers import LlamaConfig

    encoder = LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, rope_theta=1e5)
    DWAttConfig(encoder_config=encoder.to_dict(), fusion="base").save_pretrained(tmp_path)
    stored = json.loads((tmp_path / "config.json").read_text())["encoder_config"]
    assert stored["rope_theta"] == 1e5 and stored["rope_parameters"]["rope_theta"] == 1e5
    assert DWAttConfig.from_pretrained(tmp_path).encoder_config.rope_parameters["rope_theta"] == 1e5


def test_checkpoints_reload_with_remote_code_only(tmp_path):
    """save_pretrained -> Auto*.from_pretrained(trust_remote_code=True) in a process that cannot import dwatt."""
    ids, mask = make_batch()
    torch.save({"ids": ids, "mask": mask}, tmp_path / "inputs.pt")
    cases = []
    for task, cls in TASKS.items():
        for fusion in FUSIONS:
            model = cls(tiny_config("roberta", fusion)).eval()
            folder = tmp_path / f"{task}-{fusion}"
            model.save_pretrained(folder)
            assert {"modeling_dwatt.py", "configuration_dwatt.py", "fusions_dwatt.py"} <= {
                p.name for p in folder.iterdir()
            }
            with torch.no_grad():
                expected = model(input_ids=ids, attention_mask=mask).logits
            cases.append((task, folder, expected, model.config.to_dict(), model.state_dict()))
    mpnet = RobertaDWAttForTokenClassification(tiny_config("mpnet", "base_plus_n")).eval()
    mpnet.save_pretrained(tmp_path / "token-mpnet")
    with torch.no_grad():
        cases.append(
            (
                "token",
                tmp_path / "token-mpnet",
                mpnet(input_ids=ids, attention_mask=mask).logits,
                mpnet.config.to_dict(),
                mpnet.state_dict(),
            )
        )

    script = textwrap.dedent(
        f"""
        import json, torch
        from transformers import AutoConfig, AutoModelForMaskedLM, AutoModelForTokenClassification
        inputs = torch.load({str(tmp_path / "inputs.pt")!r})
        autos = {{"token": AutoModelForTokenClassification, "mlm": AutoModelForMaskedLM}}
        results = {{}}
        for task, folder in json.loads({json.dumps([(t, str(f)) for t, f, *_ in cases])!r}):
            model = autos[task].from_pretrained(folder, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            with torch.no_grad():
                logits = model(input_ids=inputs["ids"], attention_mask=inputs["mask"]).logits
            config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
            results[folder] = {{"logits": logits, "config": config.to_dict(), "state": model.state_dict(),
                               "class": type(model).__name__}}
        torch.save(results, {str(tmp_path / "results.pt")!r})
        """
    )
    run_without_dwatt(script, tmp_path)
    results = torch.load(tmp_path / "results.pt")
    for task, folder, expected, config, state in cases:
        result = results[str(folder)]
        assert result["class"] == TASKS[task].__name__
        torch.testing.assert_close(result["logits"], expected, atol=1e-6, rtol=0)
        for key in ("fusion", "encoder_config", "d_pos", "num_extra_layers", "id2label"):
            assert result["config"][key] == config[key], key
        assert result["state"].keys() == state.keys()
        if "dwatt.fusion.layer_positions" in state:
            assert torch.equal(result["state"]["dwatt.fusion.layer_positions"], state["dwatt.fusion.layer_positions"])


def test_head_with_another_label_count_is_refused(tmp_path):
    RobertaDWAttForTokenClassification(tiny_config(num_labels=5)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"classifier\.weight: checkpoint \(5, 32\) vs model \(3, 32\)"):
        AutoModelForTokenClassification.from_pretrained(tmp_path, num_labels=3)
    fresh_head = AutoModelForTokenClassification.from_pretrained(tmp_path, num_labels=3, ignore_mismatched_sizes=True)
    assert fresh_head.classifier.out_features == 3


def test_backbone_shape_mismatch_is_refused(tmp_path):
    RobertaDWAttForTokenClassification(tiny_config()).save_pretrained(tmp_path)
    other = tiny_config()
    other.encoder_config.intermediate_size = 40
    with pytest.raises(
        ValueError, match=r"layer\.0\.intermediate\.dense\.weight: checkpoint \(37, 32\) vs model \(40, 32\)"
    ):
        RobertaDWAttForTokenClassification.from_pretrained(tmp_path, config=other)


@pytest.mark.real_weights
@pytest.mark.parametrize("cls", [RobertaDWAttForTokenClassification, RobertaDWAttForMaskedLM])
def test_from_backbone_loads_every_minilm_weight(minilm_path, cls):
    from transformers import AutoModel, AutoTokenizer

    model = cls.from_backbone(str(minilm_path), fusion="dwatt", num_labels=9).eval()
    reference = AutoModel.from_pretrained(minilm_path).eval()
    ours = model.dwatt.backbone.state_dict()
    theirs = {k: v for k, v in reference.state_dict().items() if not k.startswith("pooler.")}
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert model.config.backbone_name_or_path == str(minilm_path)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    batch = tokenizer(["EU rejects German call", "Peter Blackburn"], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_layer_weights=True)
        expected_last = reference(**batch).last_hidden_state
        states = model.dwatt(**batch, output_hidden_states=True).hidden_states
    assert torch.equal(states[-1], expected_last)
    assert out.layer_weights.shape[-1] == 6 and torch.isfinite(out.logits).all()
    if cls is RobertaDWAttForMaskedLM:
        embeddings = reference.embeddings.word_embeddings.weight
        assert torch.equal(model.lm_head.decoder.weight, embeddings)
        assert (
            model.lm_head.decoder.weight.data_ptr()
            != model.dwatt.backbone.embeddings.word_embeddings.weight.data_ptr()
        )


@pytest.mark.parametrize("fusion", ["dwatt", "concat", "scalar_mix", "base", "base_plus_n"])
def test_fusing_labelled_positions_only_keeps_loss_logits_and_gradients(fusion):
    model = RobertaDWAttForTokenClassification(tiny_config("roberta", fusion)).eval()
    ids, mask = make_batch()
    labels = torch.randint(0, 5, ids.shape).masked_fill(mask == 0, -100)
    labels[0, 2] = -100  # a later sub-word
    outputs = {}
    for switch in (False, True):
        model.zero_grad()
        model.fuse_labelled_positions_only = switch
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        outputs[switch] = (out.loss.detach(), out.logits.detach()[labels != -100], grads)
    torch.testing.assert_close(outputs[True][0], outputs[False][0], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(outputs[True][1], outputs[False][1], atol=1e-6, rtol=1e-6)
    assert outputs[True][2].keys() == outputs[False][2].keys()
    for name in outputs[False][2]:
        torch.testing.assert_close(outputs[True][2][name], outputs[False][2][name], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("fusion", FUSIONS)
def test_a_batch_without_any_target_has_zero_loss_and_gradients(fusion):
    model = RobertaDWAttForMaskedLM(tiny_config("roberta", fusion))
    model.fuse_labelled_positions_only = True  # as in training: no position is fused at all
    ids, mask = make_batch()
    out = model(input_ids=ids, attention_mask=mask, labels=torch.full_like(ids, -100))
    assert out.loss.item() == 0.0
    out.loss.backward()
    assert all(p.grad is None or not p.grad.any() for p in model.dwatt.fusion.parameters())


def test_dwatt_output_is_the_papers_formula_whatever_the_memory_layout_of_the_layers():
    """h = z_L + sum_n softmax_n(q . k_n) v_n, q = 1 + elu(z_L + f^Q(z_L)), written plainly, against the fused
    implementation fed a contiguous (batch, layers, ...) stack and the layer-major view `DWAttModel` builds."""
    from fusions_dwatt import DepthWiseAttention

    fusion = DepthWiseAttention(tiny_config("roberta", "dwatt"))
    with torch.no_grad():
        for parameter in fusion.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.3)
        fusion.layer_positions.uniform_()
    per_layer = [torch.randn(2, 5, 32) for _ in range(3)]
    z_last = per_layer[-1]
    with torch.no_grad():
        query = 1 + torch.nn.functional.elu(z_last + fusion.query(z_last))
        scores = torch.softmax(query @ fusion.key(fusion.layer_positions).t(), dim=-1)
    layer_norm = torch.nn.functional.layer_norm

    def value(n: int, z: torch.Tensor) -> torch.Tensor:  # v_n = LN_n(f^V_n(z_n)), one MLP per layer
        up = torch.nn.functional.gelu(z @ fusion.value_up_weight[n] + fusion.value_up_bias[n, 0])
        up = layer_norm(
            up, up.shape[-1:], fusion.value_mid_norm_weight[n, 0], fusion.value_mid_norm_bias[n, 0], fusion.eps
        )
        down = up @ fusion.value_down_weight[n] + fusion.value_down_bias[n, 0]
        return layer_norm(down, (32,), fusion.value_norm_weight[n, 0], fusion.value_norm_bias[n, 0], fusion.eps)

    with torch.no_grad():
        expected = z_last + sum(scores[..., n : n + 1] * value(n, per_layer[n]) for n in range(3))
    stacks = (torch.stack(per_layer, dim=1), torch.stack(per_layer, dim=0).transpose(0, 1))
    # Inference on the CPU (no grad) reads the layers one by one, from a stack or from a list; training (grad)
    # runs the batched matmuls. All give the formula.
    for layers, grad in [(stack, grad) for stack in stacks for grad in (False, True)] + [(per_layer, False)]:
        with torch.set_grad_enabled(grad):
            assert fusion.reads_layer_by_layer(z_last.device) is not grad
            fused, weights = fusion(layers, z_last)
        torch.testing.assert_close(fused.detach(), expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(weights.detach(), scores, atol=1e-6, rtol=0)


@pytest.mark.parametrize("encoder", ["roberta", "bert", "mpnet"])
def test_cpu_inference_fuses_the_backbones_layers_without_stacking_them_and_equals_training_mode(encoder, monkeypatch):
    model = RobertaDWAttForTokenClassification(tiny_config(encoder, "dwatt")).eval()
    ids, mask = make_batch()
    with torch.enable_grad():
        expected = model(input_ids=ids, attention_mask=mask, output_layer_weights=True)
    stacked = []
    stack = torch.stack
    monkeypatch.setattr(
        torch,
        "stack",
        lambda tensors, *args, **kwargs: stacked.append(len(tensors)) or stack(tensors, *args, **kwargs),
    )
    with torch.no_grad():
        served = model(input_ids=ids, attention_mask=mask, output_layer_weights=True)
    assert model.config.encoder_config.num_hidden_layers not in stacked  # the fused layers were never stacked
    torch.testing.assert_close(served.logits, expected.logits.detach(), atol=1e-5, rtol=0)
    torch.testing.assert_close(served.layer_weights, expected.layer_weights.detach(), atol=1e-6, rtol=0)


STANDARD_FORWARD_ARGUMENTS = ("return_dict", "output_hidden_states", "output_attentions")


def test_the_base_model_takes_every_argument_the_task_models_take_as_transformers_models_do():
    import inspect

    from modeling_dwatt import DWAttModel, RobertaDWAttForSequenceClassification

    base = set(inspect.signature(DWAttModel.forward).parameters)
    for cls in (RobertaDWAttForTokenClassification, RobertaDWAttForMaskedLM, RobertaDWAttForSequenceClassification):
        task = set(inspect.signature(cls.forward).parameters) - {"labels", "logits_mask"}
        assert task <= base, f"{cls.__name__} takes {sorted(task - base)}, DWAttModel does not"
    assert set(STANDARD_FORWARD_ARGUMENTS) <= base
    config = tiny_config("bert", "dwatt")
    config.encoder_config._attn_implementation = "eager"  # attention maps come from eager attention only
    model = DWAttModel(config).eval()
    ids = torch.randint(3, 99, (2, 6))
    with torch.no_grad():
        out = model(input_ids=ids, return_dict=True, output_hidden_states=True, output_attentions=True)
        as_tuple = model(input_ids=ids, return_dict=False, output_hidden_states=True)
        plain = model(input_ids=ids)
    assert len(out.hidden_states) == 4 and len(out.attentions) == 3 and out.attentions[0].shape == (2, 4, 6, 6)
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], out.last_hidden_state) and len(as_tuple[1]) == 4
    assert plain.hidden_states is None and plain.attentions is None
    model.config.output_hidden_states = True  # the config's default, as for every transformers model
    with torch.no_grad():
        assert len(model(input_ids=ids).hidden_states) == 4
    task = RobertaDWAttForTokenClassification(config).eval()
    with torch.no_grad():
        tagged = task(input_ids=ids, output_attentions=True, return_dict=True)
    assert len(tagged.attentions) == 3


@pytest.mark.parametrize("encoder", ["bert", "roberta"])
def test_the_base_head_reads_the_one_layer_it_is_given(encoder):
    from modeling_dwatt import DWAttModel

    config = tiny_config(encoder, "base", fused_layers="2")
    assert config.read_layer == 2 and tiny_config(encoder, "base").read_layer == 3
    model = RobertaDWAttForTokenClassification(config).eval()
    assert model.dwatt.fused_layer_indices == [2]
    ids = torch.randint(3, 99, (2, 6))
    with torch.no_grad():
        hidden = model.dwatt.run_backbone(input_ids=ids)
        logits = model(input_ids=ids).logits
        from_cache = model(backbone_hidden_states=torch.stack(hidden, dim=1)).logits
    torch.testing.assert_close(logits, model.classifier(hidden[2]), atol=1e-6, rtol=0)
    torch.testing.assert_close(from_cache, logits, atol=1e-6, rtol=0)
    assert isinstance(DWAttModel(config).fusion, type(model.dwatt.fusion))
    for spec, message in (
        ("1,3", "names several layers, but the 'base' head reads one"),
        ("7", r"names layers \[7\]; the backbone's are 0..3 \(0: the embedding output\)"),
    ):
        with pytest.raises(ValueError, match=message):
            tiny_config(encoder, "base", fused_layers=spec)
    with pytest.raises(
        ValueError,
        match="'base_plus_n' fusion builds on the last layer only; leave it 'all', read one layer with base",
    ):
        tiny_config(encoder, "base_plus_n", fused_layers="2")


@pytest.mark.parametrize("encoder", ["bert", "llama"])
def test_a_base_head_on_layer_0_reads_the_embedding_output(encoder):
    """The probe's floor among its layers: hidden state 0, from the backbone run live or from a cache of every
    hidden state, the backbone cut to its first layer (it runs no deeper); the fusions that mix layers take the
    embedding output with `include_embeddings`, not as layer 0."""
    from transformers import LlamaConfig

    def configured(fusion: str, **kwargs) -> DWAttConfig:
        if encoder != "llama":
            return tiny_config(encoder, fusion, **kwargs)
        llama = LlamaConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37)
        return DWAttConfig(encoder_config=llama.to_dict() | {"vocab_size": 99}, fusion=fusion, num_labels=5, **kwargs)

    config = configured("base", fused_layers="0")
    assert (config.read_layer, config.run_depth) == (0, 1)
    assert layers_to_run([0]) == 1 and layers_to_run([0, 2]) == 2  # what the probe's shared backbone runs too
    model = RobertaDWAttForTokenClassification(config).eval()
    assert model.dwatt.fused_layer_indices == [0] and model.dwatt.is_cut
    ids = torch.randint(3, 99, (2, 6))
    whole = RobertaDWAttForTokenClassification(configured("base")).eval()
    whole.dwatt.backbone.load_state_dict(model.dwatt.backbone.state_dict(), strict=False)
    with torch.no_grad():
        hidden = whole.dwatt.run_backbone(input_ids=ids)
        logits = model(input_ids=ids).logits
        from_cache = model(backbone_hidden_states=torch.stack(hidden, dim=1)).logits
    torch.testing.assert_close(logits, model.classifier(hidden[0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(from_cache, logits, atol=1e-6, rtol=0)
    for fusion in ("scalar_mix", "dwatt"):
        with pytest.raises(ValueError, match=r"names layers \[0\]; the backbone's are 1..3$"):
            configured(fusion, fused_layers="0-2")


def test_from_backbone_refuses_an_argument_that_only_looks_like_a_config_argument(tiny_backbone):
    from dwatt import DWAttForTokenClassification

    for misspelt, meant in (("layers", "fused_layers"), ("d_poss", "d_pos"), ("num_extra_layer", "num_extra_layers")):
        with pytest.raises(
            TypeError, match=rf"'{misspelt}' is not an argument of DWAttConfig .*did you mean '{meant}'"
        ):
            DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="base", num_labels=3, **{misspelt: 1})
    model = DWAttForTokenClassification.from_backbone(
        str(tiny_backbone),
        fusion="base",
        num_labels=3,
        fused_layers="1",
        problem_type="single_label_classification",
        pad_token_id=0,
    )
    assert model.config.fused_layers == "1" and model.config.run_depth == 1


@pytest.mark.parametrize("fusion", ["dwatt", "base_plus_n", "concat"])
def test_the_model_says_what_its_head_is(fusion):
    """`head_parameters` is everything but the backbone, found by the modules (no name prefix), and what the FE
    setting trains; `head_state` is the same part of the state dict."""
    from dwatt.training import FreezeBackboneCallback

    model = DWAttForTokenClassification(tiny_config("bert", fusion))
    backbone = {id(p) for p in model.dwatt.backbone.parameters()}
    head = model.head_parameters()
    assert {id(p) for p in head.values()} == {id(p) for p in model.parameters()} - backbone
    assert head and all(name in model.state_dict() for name in head)
    FreezeBackboneCallback("fe").apply(model)
    assert sorted(name for name, p in model.named_parameters() if p.requires_grad) == sorted(head)
    state = model.head_state()
    assert set(head) | set(model.head_buffers()) == set(state)
    assert all(torch.equal(state[name], p) for name, p in head.items())


def test_a_linear_fusion_and_head_are_one_map_of_each_token():
    """Concat's classifier after its projection is one affine map of each token's layers side by side: the model's
    logits in eval; fusions that are no such map offer none."""
    model = DWAttForTokenClassification(tiny_config("bert", "concat")).eval()
    ids = torch.randint(1, 50, (2, 6))
    with torch.no_grad():
        hidden = model.dwatt.run_backbone(input_ids=ids, attention_mask=torch.ones_like(ids))
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        weight, bias = model.token_linear_map()
        layers = model.dwatt.select_layers(hidden).transpose(1, 2).flatten(2)
    torch.testing.assert_close(layers @ weight.T + bias, logits, rtol=1e-5, atol=1e-5)
    assert DWAttForTokenClassification(tiny_config("bert", "dwatt")).token_linear_map() is None
