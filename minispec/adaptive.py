"""Adaptive draft length: how many tokens to draft in the next round (survey section 3.1.4).

A fixed gamma is a bet on the acceptance rate alpha (theory.best_gamma). Text is not uniform:
boilerplate is easy to guess, a new identifier is not. So the draft length can follow the text:
  Fixed(gamma)           always gamma (what an int gamma means);
  Heuristic(gamma)       +2 after a fully accepted block, -1 (down to 1) otherwise: transformers'
                         num_assistant_tokens_schedule="heuristic" (there it also carries over
                         between generate calls; here every call starts from gamma again);
  ConfidenceDrafter      stops drafting as soon as the draft is unsure, max_x q(x) < threshold
                         (transformers' assistant_confidence_threshold, without its auto-tuning).
A policy exposes `gamma` (for the next round), `update(step)` (after it) and `reset()` (at the start
of a speculative_generate call). Any such choice is lossless: gamma depends only on the past, and
each round's verification is exact for any number of drafted tokens (tests/test_adaptive.py).
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
    """+2 after a round whose drafts were all kept, -1 otherwise (never below 1, nor above max_gamma).

    Example: speculative_generate(t, d, ids, gamma=Heuristic(4))
    """

    def __init__(self, gamma=4, max_gamma=None):
        super().__init__(gamma)
        self.max_gamma = max_gamma

    def update(self, step):
        if step.drafted:  # a round without drafts (the last token) says nothing about acceptance
            self.gamma = self.gamma + 2 if step.bonus else max(1, self.gamma - 1)
            if self.max_gamma:
                self.gamma = min(self.gamma, self.max_gamma)


def as_policy(gamma):
    """An int becomes Fixed(gamma); a policy object is used as it is."""
    return gamma if hasattr(gamma, "update") else Fixed(gamma)


class ConfidenceDrafter(ModelDrafter):
    """A draft model that stops early once its own confidence max softmax(logits) < threshold.

    The unsure token is still proposed (it may be right); only the drafting after it is skipped.
    gamma becomes the largest draft length. Confidence is read from the raw softmax, so it also
    works at temperature 0, where q is one-hot.
    Example: speculative_generate(t, ConfidenceDrafter(draft, 0.5), ids, gamma=8)
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
            if float(logits.softmax(-1).max()) < self.threshold:
                break
        return tokens, torch.stack(qs) if qs else torch.zeros(0, self.vocab_size)
