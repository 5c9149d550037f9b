"""Drafters: anything that proposes the next few tokens together with the q they were drawn from.

A drafter answers one question, `propose(context, gamma, ...)`: up to gamma next tokens and, for
each, the distribution q it was drawn from, shape (n, V). Speculative sampling is lossless for
*any* q as long as the token really was drawn from it; a deterministic drafter (prompt lookup,
greedy) has a one-hot q. After verification, `rollback(n)` says that only the first n tokens of
the context it last saw are still valid, so a drafter with a cache can crop it.
"""
import torch

from .sampling import probs, sample


class Drafter:
    """The interface. Subclasses implement propose; rollback is optional (stateless drafters)."""

    vocab_size = None

    def propose(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None):
        """context: list[int] -> (tokens: list[int], q: tensor (len(tokens), V))."""
        raise NotImplementedError

    def rollback(self, n):
        """Only the first n tokens of the last context (plus proposals) are still valid."""

    def reset(self):
        """Forget all state (a new prompt begins)."""


class ModelDrafter(Drafter):
    """A small GPT drafting autoregressively with its own KV cache (the classic setup)."""

    def __init__(self, model):
        self.model, self.vocab_size = model, model.config.vocab_size
        self.cache, self.calls = None, 0

    def reset(self):
        self.cache = self.model.new_cache()

    @torch.inference_mode()
    def propose(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None):
        if self.cache is None:
            self.reset()
        tokens, qs = [], []
        new = context[self.cache.length:]  # catch up on what the target committed since last time
        for _ in range(gamma):
            logits = self.model(torch.tensor([new]), self.cache)[0, -1]  # (V,)
            self.calls += 1
            q = probs(logits, temperature, top_k, top_p)
            tokens.append(sample(q, generator) if temperature > 0 else int(q.argmax()))
            qs.append(q)
            new = tokens[-1:]
        # the last proposal was never fed: the cache holds context + tokens[:-1]
        return tokens, torch.stack(qs) if qs else torch.zeros(0, self.vocab_size)

    def rollback(self, n):
        if self.cache is not None:
            self.cache.crop(min(n, self.cache.length))
