"""Batching (survey section 4, throughput): many prompts of different lengths in one call.

`ragged`: the cache with a length per row, the mask and `feed`; `loop`: generate and the
speculative loop for a batch, the core loop (minispec.speculate) with a row index."""
from .loop import generate_batch, speculative_generate_batch
from .ragged import RaggedCache, causal_mask, feed

__all__ = ["RaggedCache", "causal_mask", "feed", "generate_batch", "speculative_generate_batch"]
