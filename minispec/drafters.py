"""Drafters: anything that proposes the next few tokens together with the q they were drawn from.

A drafter answers one question, `propose(context, gamma, ...)`: up to gamma next tokens and, for
each, the distribution q it was drawn from, shape (n, V). Speculative sampling is lossless for
*any* q as long as the token really was drawn from it; a deterministic drafter (prompt lookup,
greedy) has a one-hot q. After verification, `rollback(n)` says that only the first n tokens of
the context it last saw are still valid, so a drafter with a cache can crop it.

Kinds here (survey section 2.1.1):
  * ModelDrafter: a small GPT drafting autoregressively (the classic setup). Wrap the shipped
    `draft`, or `draft_distilled`, the same network distilled on the target's own distribution
    (DistillSpec, Zhou et al. 2024; reproduce with `python -m minispec.train --distill`).
  * PromptLookupDrafter: no model at all (Saxena 2023). Find the last n tokens earlier in the
    context and propose what followed them there; strong on code, which repeats itself.
"""
import torch
import torch.nn.functional as F

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

    def reset(self):  # twice block_size entries: room for a drafted tree (tree.grow_tree) next to the context
        self.cache = self.model.new_cache(size=2 * self.model.config.block_size)

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


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding: match the context's last n-gram earlier in the context, copy what followed.

    The longest n in [min_n, max_n] with a match wins, and its most recent occurrence is proposed.
    The copy may run into its own output (as in LZ77), so a repeating pattern continues periodically.
    The proposal is deterministic, so q is one-hot on it: a valid q, and verification stays lossless.
    Example: PromptLookupDrafter(max_n=2).propose([5, 6, 7, 8, 5, 6], 3)[0] == [7, 8, 5]
    """

    def __init__(self, max_n=3, min_n=1, vocab_size=256):
        if int(min_n) != min_n or not 1 <= min_n <= max_n:
            raise ValueError(f"need integers 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.max_n, self.min_n, self.vocab_size = int(max_n), int(min_n), vocab_size

    def matches(self, context, gamma):
        """All distinct continuations (gamma tokens) of the longest matching n-gram, most recent first."""
        context = list(context)
        for n in range(min(self.max_n, len(context) - 1), self.min_n - 1, -1):
            tail, found = context[-n:], []
            for i in range(len(context) - n - 1, -1, -1):  # earlier occurrences, newest first
                if context[i:i + n] == tail:
                    buf = context[:]
                    for j in range(gamma):  # copy forward; past the end, copy the copy
                        buf.append(buf[i + n + j])
                    if buf[len(context):] not in found:
                        found.append(buf[len(context):])
            if found:
                return found
        return []  # no match (or context shorter than min_n + 1): propose nothing
    def propose(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None):
        found = self.matches(context, gamma)
        tokens = found[0] if found else []
        return tokens, F.one_hot(torch.tensor(tokens, dtype=torch.long), self.vocab_size).float()  # (n, V)


class FallbackDrafter(Drafter):
    """Ask `first` (e.g. prompt lookup with min_n=3: long, free matches); if it proposes nothing, ask
    `then` for at most then_gamma tokens (a model draft is worth less per token and costs more).

    Example: FallbackDrafter(PromptLookupDrafter(min_n=3), ModelDrafter(load_model("draft")), then_gamma=4)
    """

    def __init__(self, first, then, then_gamma=None):
        self.first, self.then, self.then_gamma = first, then, then_gamma
        self.vocab_size, self.calls = first.vocab_size or then.vocab_size, 0

    def propose(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None):
        tokens, q = self.first.propose(context, gamma, temperature, top_k, top_p, generator)
        if not tokens:
            calls = getattr(self.then, "calls", 0)
            tokens, q = self.then.propose(context, min(gamma, self.then_gamma or gamma), temperature, top_k, top_p,
                                          generator)
            self.calls += getattr(self.then, "calls", 0) - calls
        return tokens, q

    def rollback(self, n):
        self.first.rollback(n), self.then.rollback(n)

    def reset(self):
        self.first.reset(), self.then.reset()


def as_drafter(draft, target):
    """A GPT becomes a ModelDrafter; anything else must be a Drafter with the target's vocabulary."""
    from .model import GPT
    if isinstance(draft, GPT):
        draft = ModelDrafter(draft)
    if not isinstance(draft, Drafter):
        raise ValueError(f"draft must be a GPT or a Drafter, got {type(draft).__name__}")
    if draft.vocab_size is not None and draft.vocab_size != target.config.vocab_size:
        raise ValueError(f"draft vocab_size {draft.vocab_size} != target vocab_size {target.config.vocab_size}")
    return draft
