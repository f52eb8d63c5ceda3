"""The feature caches a process keeps, so that the runs of a sweep reading one frozen backbone on the same sentences
compute them once."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

from .cache import FeatureCache


class FeatureMemo:
    """
    Feature caches kept for the life of a process, so the runs of a sweep that read the same frozen backbone on
    the same sentences (every fusion of a trial, every epoch budget, every trial on the dev split) compute them
    once. A key is `(layers, rest)`: the hidden-state indices a cache holds, and everything else the features depend
    on (backbone and revision, dtype, positions, the dataset's contents). A cache of some layers is taken from a
    remembered one of more layers with the same `rest` (Base's z_L out of DWAtt's all layers) instead of running the
    backbone again. The least recently used caches go first when `max_bytes` would be exceeded.
    """

    def __init__(self, max_bytes: int = 4 << 30):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, FeatureCache] = OrderedDict()
        self.hits = self.misses = 0

    def __contains__(self, key: Hashable) -> bool:
        """Whether `get` returns the cache without building it: remembered, or taken from one of more layers."""
        return key in self._entries or self._superset(key) is not None

    def _superset(self, key: Hashable) -> tuple | None:
        """A remembered cache holding every layer of `key` with the same `rest`, and where those layers sit in it."""
        layers, rest = key
        for (their_layers, their_rest), cache in self._entries.items():
            if their_rest == rest and set(layers) <= set(their_layers):
                return cache, [their_layers.index(layer) for layer in layers]
        return None

    def get(self, key: Hashable, build: Callable[[], FeatureCache]) -> FeatureCache:
        if key in self._entries:
            self.hits += 1
            self._entries.move_to_end(key)
            return self._entries[key]
        superset = self._superset(key)
        if superset is not None:
            self.hits += 1
            cache = superset[0].select_layers(superset[1])
        else:
            self.misses += 1
            cache = build()
        self._entries[key] = cache
        while len(self._entries) > 1 and sum(c.nbytes for c in self._entries.values()) > self.max_bytes:
            self._entries.popitem(last=False)
        return cache

    def memory_bytes(self) -> int:
        """What the remembered caches held in memory take (those memory-mapped from files take none)."""
        return sum(cache.nbytes for cache in self._entries.values() if cache.storage == "memory")

    def clear(self) -> None:
        self._entries.clear()
        self.hits = self.misses = 0
