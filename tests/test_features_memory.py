"""Where caches go within the memory budget (dwatt.features.memory): a disk that cannot hold one refused before any
write, a budget sending what does not fit beside the model to disk, freed memory handed back past a slack."""

import pytest
from transformers import BertTokenizerFast

from dwatt import RobertaDWAttForTokenClassification
from dwatt.data import load_conll2003, tokenize_and_align
from dwatt.features.build import build_feature_cache

from .helpers import counting_backbone_runs


def test_a_disk_that_cannot_hold_the_cache_is_refused_before_any_write_naming_the_file(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    import errno
    import os

    from dwatt.features.memory import CacheTooLargeError

    def full(descriptor, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    tokens = tokenize_and_align(
        load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone)
    )
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9).eval()
    runs = counting_backbone_runs(model, monkeypatch)
    with pytest.raises(
        CacheTooLargeError,
        match=f"the feature cache {tmp_path / 'features.bin'} needs .* GiB on its disk, "
        "which cannot hold it \\(No space left on device\\)",
    ):
        build_feature_cache(model, tokens, progress=False, path=tmp_path / "features.bin", key={"backbone": "a"})
    assert runs == [] and not (tmp_path / "features.bin").exists()


def test_a_memory_budget_sends_the_caches_that_do_not_fit_beside_the_model_to_disk(monkeypatch, tmp_path):
    import collections

    import psutil

    from dwatt.features.memory import WORKING_MARGIN, CacheTooLargeError, cache_storage

    monkeypatch.setattr(psutil, "virtual_memory", lambda: collections.namedtuple("Memory", "available")(64 << 30))
    assert cache_storage(2 << 30, tmp_path, max_memory=None, model_bytes=3 << 30) is None
    assert cache_storage(2 << 30, tmp_path, max_memory=8 << 30, model_bytes=3 << 30) is None
    assert cache_storage(5 << 30, tmp_path, max_memory=8 << 30, model_bytes=3 << 30) == tmp_path
    # caches already in memory take their share: a new one goes to disk, the model is not refused for them
    assert cache_storage(1 << 30, tmp_path, max_memory=8 << 30, model_bytes=3 << 30, cached_bytes=5 << 30) == tmp_path
    assert cache_storage(1, tmp_path, on_disk=True) == tmp_path  # --cache-on-disk: to files, however small
    with pytest.raises(
        CacheTooLargeError,
        match=r"--max-memory 3.00 GiB: the model alone takes 3.00 GiB, .* give a budget "
        r"of at least 5.00 GiB",
    ):
        cache_storage(1, tmp_path, max_memory=3 << 30, model_bytes=3 << 30)
    assert WORKING_MARGIN == 2 << 30


def test_freed_memory_goes_back_once_anonymous_memory_grew_by_the_slack(monkeypatch):
    """A loop's `release()` after each batch hands freed memory back on its first call, then only once the process's
    anonymous memory has grown by more than the slack since: not on every batch."""
    import dwatt.features.memory as features

    anonymous, released = [100], []
    monkeypatch.setattr(features, "anonymous_bytes", lambda: anonymous[0])
    monkeypatch.setattr(features, "release_freed_memory", lambda: released.append(anonymous[0]))
    freed = features.FreedMemoryRelease(slack=10)
    for level in (100, 105, 110, 111, 115, 130, 131):
        anonymous[0] = level
        freed.release()
    assert released == [100, 111, 130]
    monkeypatch.setattr(features, "anonymous_bytes", lambda: None)  # a system that does not say: nothing released
    features.FreedMemoryRelease().release()
    assert released == [100, 111, 130]


def test_anonymous_bytes_is_what_the_system_calls_rss_anon():
    from pathlib import Path

    from dwatt.features.memory import anonymous_bytes

    if not Path("/proc/self/status").exists():
        pytest.skip("reads /proc: Linux only")
    status = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("RssAnon"))
    assert abs(anonymous_bytes() - status) < 8 << 20
