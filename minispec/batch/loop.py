"""The loops of minispec.speculate for a batch of prompts: the same four steps, a row index added.

Diff speculative_generate_batch against speculate.speculative_generate: each row drafts its own
chain, ONE target call scores every row (feed), each row is verified on its own, and each row's
cache rolls back to its own length. The drafters that batch are chains: a model drafter without
branching, prompt lookup, and a FallbackDrafter of the two (`batched`). At temperature 0 every
row equals that prompt decoded alone (tests/test_batch.py checks it, and losslessness per row).
"""
import time

import torch

from ..adaptive import as_policy
from ..drafters import ModelDrafter, PromptLookupDrafter, as_drafter, pick, unsure
from ..methods.fallback import FallbackDrafter
from ..rounds import Step, check_args, check_prompt, finish, tokens_left
from ..sampling import probs, sample, whole
from ..tree import Tree
from ..verify import multi_draft_accept, verify_tree
from .ragged import RaggedCache, feed


def is_batch(ids):
    """A list of prompts (each a list or a 1-d tensor), or a (B, T) tensor or array with B > 1."""
    if hasattr(ids, "ndim"):  # a tensor or a numpy array
        return ids.ndim == 2 and len(ids) > 1
    rows = ids if isinstance(ids, (list, tuple)) else ()  # any row, not only the first, says so
    return any(isinstance(r, (list, tuple, bytes, range)) or getattr(r, "ndim", 0) for r in rows)


def new_cache(model, rows, size=None):
    """A RaggedCache of `rows` rows on the model's device and dtype."""
    w = model.wte.weight
    return RaggedCache(model.config, rows, size, w.device, w.dtype)


class Chains:
    """A model drafter's chains for every row: one draft call a step for the rows still drafting."""

    def __init__(self, drafter, rows, size=None):
        self.model = drafter.model
        self.threshold = drafter.threshold
        self.cache = new_cache(self.model, rows, size or 2 * self.model.config.block_size)
        self.calls = 0

    def draft(self, contexts, gammas, temperature, top_k, top_p, generator):
        tokens, qs = [[] for _ in contexts], [[] for _ in contexts]
        new = [c[L:] if n else [] for c, L, n in zip(contexts, self.cache.lengths, gammas)]
        while any(new):
            logits = feed(self.model, self.cache, new)[1]  # (B, T, V)
            self.calls += 1
            for b, seq in enumerate(new):
                if seq:
                    last = logits[b, len(seq) - 1]
                    token, q = pick(last, temperature, top_k, top_p, generator)
                    tokens[b].append(token)
                    qs[b].append(q)
                    done = len(tokens[b]) == gammas[b] or unsure(last, self.threshold)
                    new[b] = [] if done else [token]
        return [Tree.chain(t, q) for t, q in zip(tokens, qs)]  # the cache: context + tokens[:-1]

    def accept(self, contexts, paths):
        L = self.cache.lengths
        self.cache.crop([min(len(c) + len(p), n) for c, p, n in zip(contexts, paths, L)])


class Lookups:
    """Prompt lookup for every row: no state, each row looks up its own context."""

    def __init__(self, drafter, rows, size=None):
        self.drafter = drafter
        self.calls = 0

    def draft(self, contexts, gammas, *sampling):
        return [self.drafter.draft(c, g) for c, g in zip(contexts, gammas)]

    def accept(self, contexts, paths):
        pass


class Fallbacks:
    """A FallbackDrafter for every row: `then` drafts the rows `first` left empty."""

    def __init__(self, drafter, rows, size=None):
        self.first = batched(drafter.first, rows, size)
        self.then = batched(drafter.then, rows, size)
        self.then_gamma = drafter.then_gamma

    @property
    def calls(self):
        return self.first.calls + self.then.calls

    def draft(self, contexts, gammas, *sampling):
        trees = self.first.draft(contexts, gammas, *sampling)
        rest = [0 if t.tokens else min(g, self.then_gamma or g) for t, g in zip(trees, gammas)]
        more = self.then.draft(contexts, rest, *sampling)
        return [m if r else t for t, m, r in zip(trees, more, rest)]

    def accept(self, contexts, paths):
        self.first.accept(contexts, paths)
        self.then.accept(contexts, paths)


def plain(drafter, kind):
    """drafter is a `kind` whose round is kind's own: a subclass's draft (a tree, perhaps), score,
    accept (a logger) or reset would never run here, so such a subclass drafts alone."""
    rounds = ("reset", "draft", "score", "accept")
    return isinstance(drafter, kind) and all(getattr(type(drafter), f) is getattr(kind, f)
                                             for f in rounds)


def batched(drafter, rows, size=None):
    """The batched form of a drafter that batches (its caches `size` entries a row), or a
    ValueError that says which do."""
    if plain(drafter, ModelDrafter) and drafter.branching is None:
        return Chains(drafter, rows, size)
    if plain(drafter, PromptLookupDrafter):
        return Lookups(drafter, rows, size)
    if plain(drafter, FallbackDrafter):
        return Fallbacks(drafter, rows, size)
    raise ValueError(f"{type(drafter).__name__} drafts one prompt at a time: decode a batch with a "
                     "GPT drafter (a chain), PromptLookupDrafter or a FallbackDrafter of the two "
                     "(a subclass batches only if it keeps their reset, draft, score and accept)")


def check_rows(model, ids, max_new_tokens, crop_prompt):
    """A batch's prompts, each checked as rounds.check_prompt does one; a row is one sequence (a
    (1, T) tensor is one, a (2, T) one two prompts: check_prompt alone would join them)."""
    for row in ids:
        if getattr(row, "ndim", 1) > 1 and len(row) != 1:
            raise ValueError(f"each prompt of a batch is one sequence of token ids, got one of "
                             f"shape {tuple(row.shape)}")
    return [check_prompt(model, p, max_new_tokens, crop_prompt) for p in ids]


def wants(prompts, contexts, max_new_tokens, eos_token):
    """How many more tokens each row wants (rounds.tokens_left, row by row)."""
    return [tokens_left(p, c, max_new_tokens, eos_token) for p, c in zip(prompts, contexts)]


@torch.inference_mode()
def generate_batch(model, ids, max_new_tokens=64, temperature=0.0, top_k=None, top_p=None,
                   seed=0, eos_token=None, crop_prompt=False):
    """speculate.generate for a list of prompts: one target call a step for every row."""
    max_new_tokens = check_args(model, max_new_tokens, temperature, top_k, top_p, eos_token, seed)
    prompts = check_rows(model, ids, max_new_tokens, crop_prompt)
    g = torch.Generator().manual_seed(int(seed))
    cache = new_cache(model, len(prompts), size=max(map(len, prompts), default=0) + max_new_tokens)
    contexts = [list(p) for p in prompts]
    t0 = time.perf_counter()
    while any(wanted := wants(prompts, contexts, max_new_tokens, eos_token)):
        new = [c[L:] for c, L in zip(contexts, cache.lengths)]  # a finished row: its last, then []
        logits = feed(model, cache, new)[1]  # (B, T, V): one target call for every row
        for b in range(len(prompts)):
            if wanted[b]:
                p = probs(logits[b, len(new[b]) - 1], temperature, top_k, top_p).cpu()  # (V,)
                contexts[b].append(sample(p, g) if temperature > 0 else int(p.argmax()))
    return [finish(p, c, [], max_new_tokens, eos_token, t0) for p, c in zip(prompts, contexts)]


@torch.inference_mode()
def speculative_generate_batch(target, drafter, ids, max_new_tokens=64, gamma=4,
                               temperature=0.0, top_k=None, top_p=None, seed=0, eos_token=None,
                               crop_prompt=False, rule=multi_draft_accept):
    """speculate.speculative_generate for a list of prompts -> a list of Results, one per prompt.
    The rows share gamma (a policy sees every row's rounds), the wall time and the draft calls."""
    max_new_tokens = check_args(target, max_new_tokens, temperature, top_k, top_p, eos_token, seed)
    policy, drafter = as_policy(gamma), as_drafter(drafter, target)
    prompts = check_rows(target, ids, max_new_tokens, crop_prompt)
    B = len(prompts)
    g = torch.Generator().manual_seed(int(seed))
    # room for the longest row and, padded to it, the most tokens another row feeds at once
    size = 2 * (max(map(len, prompts), default=0) + max_new_tokens)
    rows = batched(drafter, B, size)  # a draft model's caches: the same room
    cache = new_cache(target, B, size)
    policy.reset()
    contexts = [list(p) for p in prompts]
    steps = [[] for _ in prompts]
    t0 = time.perf_counter()
    while any(wanted := wants(prompts, contexts, max_new_tokens, eos_token)):
        # 1. draft: each row at most gamma tokens, and no more than it wants besides the target's
        k = min(whole(policy.gamma, "the policy's gamma"), target.config.block_size)
        gammas = [max(min(k, w - 1), 0) for w in wanted]
        trees = rows.draft(contexts, gammas, temperature, top_k, top_p, g)
        # 2. one target call for every row: its uncached context end, then its chain
        seqs = [c[L:] + t.tokens for c, L, t in zip(contexts, cache.lengths, trees)]
        logits = feed(target, cache, seqs)[1]  # (B, T, V): row b's first len(seqs[b]) are its own
        # 3. verify each row that still wants tokens (a finished row keeps nothing)
        paths, tokens = [[] for _ in range(B)], [None] * B
        for b in range(B):
            if wanted[b]:
                n, N = len(seqs[b]), len(trees[b].tokens)
                p = probs(logits[b, n - N - 1:n], temperature, top_k, top_p).cpu()  # (1 + N, V)
                paths[b], tokens[b] = verify_tree(trees[b], p, temperature, g, rule)
        # 4. roll back: each row keeps its context and its kept drafts; tell the drafter
        cache.crop([len(c) + len(p) for c, p in zip(contexts, paths)])
        rows.accept(contexts, paths)
        for b in range(B):
            if tokens[b] is not None:
                contexts[b] += trees[b].tokens[:len(paths[b])] + [tokens[b]]
                steps[b].append(Step(trees[b], paths[b], tokens[b]))
                policy.update(steps[b][-1])
    return [finish(p, c, s, max_new_tokens, eos_token, t0, rows.calls)
            for p, c, s in zip(prompts, contexts, steps)]
