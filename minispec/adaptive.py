"""Adaptive draft length: how many tokens to draft in the next round (survey section 3.1.4).

A fixed gamma bets on one acceptance rate alpha (theory.best_gamma), but text has easy and hard
stretches, so the draft length can follow it:
  Fixed(gamma)        always gamma (what an int gamma means);
  Heuristic(gamma)    +2 after a fully accepted round, -1 (down to 1) otherwise: transformers'
                      num_assistant_tokens_schedule="heuristic" (each call starts again from gamma);
  ConfidenceDrafter   stops a round once the draft is unsure, max softmax < threshold
                      (transformers' assistant_confidence_threshold, without its auto-tuning).
A policy has `gamma` (next round), `update(step)` (after it) and `reset()` (new call). All are
lossless: the draft length depends only on the past and on the draft's own tokens.
"""
import torch

from .drafters import ModelDrafter
from .sampling import probs, sample


class Fixed:
    """Always draft gamma tokens. Example: speculative_generate(t, d, ids, gamma=Fixed(4))"""

    def __init__(self, gamma):
        if int(gamma) != gamma or gamma < 1:
            raise ValueError(f"gamma (draft length) must be an integer >= 1, got {gamma}")
        self.start = self.gamma = int(gamma)

    def reset(self):
        self.gamma = self.start

    def update(self, step):
        """Called with the Step record of the round that just ended."""


class Heuristic(Fixed):
    """+2 after a round whose drafts were all kept, else -1. Example: gamma=Heuristic(4)"""

    def update(self, step):
        if step.drafted:  # a round without drafts (the last token) says nothing
            self.gamma = self.gamma + 2 if step.bonus else max(1, self.gamma - 1)


def unsure(logits, threshold):
    """The confidence stop: the drafter's max softmax is below threshold (never, for None)."""
    return threshold is not None and float(logits.softmax(-1).max()) < threshold


def as_policy(gamma):
    """An int becomes Fixed(gamma); a policy object is used as it is."""
    return gamma if hasattr(gamma, "update") else Fixed(gamma)


class ConfidenceDrafter(ModelDrafter):
    """A draft model that ends its proposal after the first token it was unsure of.

    Confidence = max softmax of the draft's logits (not q, which is one-hot at temperature 0).
    gamma is the longest proposal. Example: speculative_generate(t, ConfidenceDrafter(d, 0.5), ids, gamma=8)
    """

    def __init__(self, model, threshold=0.5):
        if not 0 <= threshold <= 1:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        super().__init__(model)
        self.threshold = threshold

    @torch.inference_mode()
    def propose(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None):
        if self.cache is None:
            self.reset()
        tokens, qs, new = [], [], context[self.cache.length:]
        for _ in range(gamma):
            logits = self.model(torch.tensor([new]), self.cache)[0, -1]  # (V,)
            self.calls += 1
            qs.append(probs(logits, temperature, top_k, top_p))
            tokens.append(sample(qs[-1], generator) if temperature > 0 else int(qs[-1].argmax()))
            new = tokens[-1:]
            if unsure(logits, self.threshold):
                break  # the unsure token is still proposed: it may well be right
        return tokens, torch.stack(qs) if qs else torch.zeros(0, self.vocab_size)
