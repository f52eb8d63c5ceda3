"""The models a sweep's runs start from (dwatt.training.initial_models): remembered, equal to a fresh build, within
their bytes, the backbone shared where it never changes."""

import pytest
import torch

from dwatt import RobertaDWAttForTokenClassification
from dwatt.training import InitialModels


@pytest.mark.parametrize("fusion", ["dwatt", "base_plus_n", "scalar_mix"])
def test_remembered_initial_models_equal_a_fresh_build(tiny_backbone, fusion):
    from transformers import set_seed

    memo = InitialModels()
    first = memo.build(str(tiny_backbone), fusion, 7, num_labels=5)
    again = memo.build(str(tiny_backbone), fusion, 7, num_labels=5)
    other_seed = memo.build(str(tiny_backbone), fusion, 8, num_labels=5)
    assert (memo.hits, memo.misses) == (1, 2)
    set_seed(7)
    fresh = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion=fusion, num_labels=5)
    for model in (first, again):
        state = model.state_dict()
        assert state.keys() == fresh.state_dict().keys()
        for name, tensor in fresh.state_dict().items():
            assert torch.equal(state[name], tensor), name
        assert not any(t.is_meta for t in (*model.parameters(), *model.buffers()))
    assert again.dwatt.backbone is not first.dwatt.backbone  # a copy: an FT run may change its own
    with torch.no_grad():
        again.classifier.weight.add_(1.0)  # training one model leaves the remembered start alone
    assert torch.equal(
        memo.build(str(tiny_backbone), fusion, 7, num_labels=5).classifier.weight, fresh.classifier.weight
    )
    if fusion != "scalar_mix":  # ScalarMix starts from constants, whatever the seed
        assert not torch.equal(other_seed.classifier.weight, fresh.classifier.weight)


def test_the_remembered_heads_stay_within_their_bytes_and_a_forgotten_one_is_built_afresh(tiny_backbone):
    """The memo keeps the latest builds' fusion and head weights within `max_head_bytes` (the latest always): with room
    for one, a second fusion's build forgets the first's, whose next build is a miss that gives the same model."""
    memo = InitialModels()
    first = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5, shares_backbone=True)
    memo.max_head_bytes = memo.head_bytes()  # room for this one head's weights, not two
    memo.build(str(tiny_backbone), "concat", 7, num_labels=5, shares_backbone=True)
    assert len(memo._heads) == 1
    again = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5, shares_backbone=True)
    assert (memo.hits, memo.misses) == (0, 3)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))
    unbounded = InitialModels()
    for fusion in ("dwatt", "concat", "dwatt"):
        unbounded.build(str(tiny_backbone), fusion, 7, num_labels=5, shares_backbone=True)
    assert (unbounded.hits, unbounded.misses) == (1, 2)


def test_the_remembered_backbones_stay_within_their_bytes_the_latest_always_kept(tiny_backbone):
    """Each depth a head is cut at loads a backbone of its own: with room for one backbone's weights, a build at
    another depth forgets the first backbone, and the first's next build is a miss that gives the same model."""
    memo = InitialModels()
    first = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5, shares_backbone=True)
    memo.max_backbone_bytes = memo.backbone_bytes()  # room for the whole backbone, not a second, shallower one
    cut = memo.build(
        str(tiny_backbone), "base", 7, num_labels=5, shares_backbone=True, fused_layers=[1], cache_layers=[1]
    )
    assert len(memo._backbones) == 1 and cut.dwatt.backbone in memo._backbones.values()
    again = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5, shares_backbone=True)
    assert (memo.hits, memo.misses) == (0, 3)
    assert again.dwatt.backbone is not first.dwatt.backbone
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))
    unbounded = InitialModels()
    for fusion, layers in (("dwatt", {}), ("base", {"fused_layers": [1], "cache_layers": [1]}), ("dwatt", {})):
        unbounded.build(str(tiny_backbone), fusion, 7, num_labels=5, shares_backbone=True, **layers)
    assert (unbounded.hits, unbounded.misses, len(unbounded._backbones)) == (1, 2, 2)


def test_fe_builds_share_one_copy_of_the_backbone_and_others_get_their_own(tiny_backbone):
    """FE never changes the backbone: its runs take the remembered one itself (a 1.5B model's weights held once, not
    once more per run), equal to a fresh build's; FT and LoRA runs get a copy, as before."""
    memo = InitialModels()
    first = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5, shares_backbone=True)
    again = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5, shares_backbone=True)
    other = memo.build(
        str(tiny_backbone), "concat", 8, num_labels=5, shares_backbone=True
    )  # a miss: loaded, then shared
    assert first.dwatt.backbone is again.dwatt.backbone is other.dwatt.backbone
    tuned = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5)
    assert tuned.dwatt.backbone is not first.dwatt.backbone
    assert all(torch.equal(a, b) for a, b in zip(tuned.state_dict().values(), again.state_dict().values()))
