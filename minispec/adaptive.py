"""Adaptive draft length: how many tokens to draft in the next round (survey section 3.1.4).

A fixed gamma bets on one acceptance rate alpha (theory.best_gamma), but text has easy and hard
stretches, so the draft length can follow it. A policy has `gamma` (next round), `update(step)`
(after it) and `reset()` (new call). A draft can also end a round itself once unsure:
ModelDrafter(draft, threshold=t) and EarlyExitDrafter(target, threshold=t) (Draft & Verify's
stop). All are lossless: the draft length depends only on the past and on the draft's own tokens.
"""
from .sampling import whole


class Fixed:
    """Always draft gamma tokens (what an int gamma means). Example: gamma=Fixed(4)"""

    def __init__(self, gamma):
        self.start = self.gamma = whole(gamma, "gamma (draft length)")

    def reset(self):
        self.gamma = self.start

    def update(self, step):
        """Called with the Step record of the round that just ended."""


class Heuristic(Fixed):
    """+2 after a round whose drafts were all kept, else -1 (down to 1): transformers'
    num_assistant_tokens_schedule="heuristic_transient" (each call starts again from gamma; its
    "heuristic" keeps the length across calls). Example: gamma=Heuristic(4)"""

    def update(self, step):
        if step.tree.tokens:  # a round without drafts (the last token) says nothing
            self.gamma = self.gamma + 2 if step.bonus else max(1, self.gamma - 1)


def as_policy(gamma):
    """An int becomes Fixed(gamma); a policy object (gamma, update, reset) is used as it is."""
    policy = hasattr(gamma, "update") and hasattr(gamma, "reset") and not isinstance(gamma, type)
    return gamma if policy else Fixed(gamma)
