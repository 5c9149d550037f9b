"""Self-speculation with a sparse cache, for long contexts (survey section 4; MagicDec, Chen et
al. 2024; TriForce, Sun et al. 2024): the target drafts for itself while attending only to
StreamingLLM's view of its own KV cache (Xiao et al. 2024): the first `sinks` entries, where
attention piles up whatever they hold, and the last `window`. The full target verifies.

Why it can pay: a decoding step reads the weights once and every cached key and value once. For
SmolLM2-135M in float32 one token's keys and values are 30 layers x 2 x 3 heads x 64 x 4 bytes
= 46 KB and the weights 538 MB, so past about 11,700 tokens of context (times the batch) the
cache is read more than the weights. A draft step over sinks + window entries reads the same
whatever the context, and the drafter is the target itself, so it agrees with it well.
Lossless whatever the window: every draft is drawn from the sparse model's own q, and
verification sees that q (the protocol's one obligation, drafters.pick).
"""
import torch

from ..drafters import Drafter, pick
from ..sampling import whole
from ..tree import Tree
from .args import check_model, draft_args


class StreamingDrafter(Drafter):
    """The target drafts a chain with attention sinks + a recent window of its own cache.
    Example: speculative_generate(model, StreamingDrafter(model, sinks=4, window=256), ids, 64)
    """

    def __init__(self, model, sinks=4, window=256):
        self.model = check_model(model)
        self.sinks = whole(sinks, "sinks (attention-sink entries kept)", low=0)
        self.window = whole(window, "window (recent entries kept)")
        self.vocab_size = model.config.vocab_size
        self._cache = None  # the target's, from reset

    def reset(self, target, cache):
        if target is not self.model:
            raise ValueError("a StreamingDrafter drafts for the model it was built on: pass that "
                             "model as the target (a reloaded model is another: build it again)")
        self._cache = cache  # the target's: read here, written only by the loop's verification

    @property
    def cache(self):
        """The target's cache that reset handed over; before reset (no loop) -> a ValueError."""
        if self._cache is None:
            raise ValueError("a StreamingDrafter drafts from the target's cache inside "
                             "speculative_generate: call reset(target, cache) first")
        return self._cache

    def kept(self, n):
        """The entries of the first n that the draft attends to: sinks, then the last window."""
        recent = max(self.sinks, n - self.window)
        return list(range(min(self.sinks, n))) + list(range(recent, n))

    def view(self, n, room):
        """A new cache of the model's kind holding entries kept(n) of the target's, then room."""
        full = self.cache
        idx = torch.tensor(self.kept(n), dtype=torch.long, device=full.k.device)
        small = self.model.new_cache(size=len(idx) + room)
        shape = list(full.k.shape)
        shape[3] = room
        small.k = torch.cat([full.k[:, :, :, idx], full.k.new_zeros(shape)], 3)
        small.v = torch.cat([full.v[:, :, :, idx], full.v.new_zeros(shape)], 3)
        small.length = len(idx)
        return small

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context, gamma = draft_args(context, gamma, depth, root=True)
        n = self.cache.length  # the target has cached context[:n]; the rest is new
        if n == 0:
            return Tree.chain([])  # the first round reads the prompt (the loop's prefill) alone
        small = self.view(n, len(context) - n + gamma)
        dev = self.model.wte.weight.device
        seq, qs, feed = list(context), [], list(context[n:])
        for _ in range(gamma):
            pos = torch.arange(len(seq) - len(feed), len(seq), device=dev)  # true positions
            h = self.model.features(torch.tensor([feed], device=dev), small, pos)
            self.calls += 1
            token, q = pick(self.model.lm_head(h[0, -1]), temperature, top_k, top_p, generator)
            seq.append(token)
            qs.append(q)
            feed = [token]
        return Tree.chain(seq[len(context):], qs)
