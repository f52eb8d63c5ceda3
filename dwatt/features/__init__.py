"""Frozen-backbone feature cache: run the backbone once, train the fusion module and head on its outputs.

In the FE setting the backbone never changes and runs without dropout, so its hidden states are the same every
epoch. `build_feature_cache` computes the layers the fusion reads (all L for DWAtt/Concat/ScalarMix, z_L only
for Base and Base+n) once per sentence and stores them unpadded, token-major, in one tensor — in memory or in a
memory-mapped file when a `path` is given. `FeatureCache` is a `torch.utils.data.Dataset` that `Trainer` reads
like any other, and `FeatureCollator` pads a batch of it for the model's `backbone_hidden_states` input.

- `cache`: the cached features as a dataset, its collator, and what a cache of a split holds and takes;
- `memo`: the caches a process keeps for its later runs;
- `memory`: where a cache goes within the memory budget, and freed memory handed back;
- `build`: the backbone's pass that fills a cache, resumable on disk, shared by processes.
"""
