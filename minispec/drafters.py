"""Drafters: the one protocol every drafting method follows (`Drafter`), and the independent
drafters of the core (survey section 2.1.1): a small model (`ModelDrafter`) and prompt lookup.
The dependent drafters, the fallback and `load_drafter` live in minispec.methods.
"""
import torch

from .model import GPT
from .sampling import probs, real, sample, whole
from .tree import Tree, check_tree_options, grow_tree, score_tree


class Drafter:
    """What the loop (speculate.speculative_generate) calls: `reset` once, then `draft`, `score`
    and `accept` every round; subclasses implement `draft`. Speculative sampling is lossless for
    *any* draft distribution q, as long as each drafted token really was drawn from the q that
    verification sees (a deterministic guess records no q)."""

    vocab_size = None  # a drafter with its own vocabulary says so: it must equal the target's
    calls = 0          # draft forward passes so far

    def reset(self, target=None, cache=None):
        """A new prompt begins: forget all state (cache: the target's, for drafters sharing it)."""

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        """context: list[int] -> a Tree of at most gamma nodes, none deeper than depth (None: any;
        the loop passes the tokens still wanted minus the target's one: a tree keeps its gamma)."""
        raise NotImplementedError("a Drafter subclass defines draft (README: RepeatLast)")

    def score(self, target, cache, context, tree):
        """The round's ONE target call (early exit overrides it to reuse its drafting): the target's
        last hidden states (T, C) and logits (T, V) of the uncached context end, then the N nodes
        (the last 1 + N rows: the root's, then the nodes')."""
        return score_tree(target, cache, context, tree)

    def accept(self, context, tree, path, hidden, logits):
        """The target kept the nodes `path` of `tree` after `context` (not extended yet); hidden,
        logits: what score computed (heads and EAGLE read hidden states, lookahead the logits)."""


def unsure(logits, threshold):
    """The confidence stop: the drafter's max softmax is below threshold (never, for None)."""
    return threshold is not None and float(logits.softmax(-1).max()) < threshold


def pick(logits, temperature, top_k, top_p, generator):
    """A draft step -> (token, q): the token drawn from the draft's q (its argmax at temperature 0)
    and that q (V,), which verification must see: the protocol's one obligation."""
    q = probs(logits, temperature, top_k, top_p).cpu()  # sampled with a CPU generator
    token = sample(q, generator) if temperature > 0 else int(q.argmax())
    return token, q


class ModelDrafter(Drafter):
    """A small GPT drafting autoregressively with its own KV cache. By default a chain of gamma
    tokens; threshold: end the chain after the first token whose max softmax is below it (at
    temperature 0, transformers' assistant_confidence_threshold without its auto-tuning); the
    length then depends only on the drafts, so sampling stays lossless. branching / width /
    score_temperature / replacement: a static or dynamic tree of gamma nodes instead, its siblings
    iid draws or (replacement=False) distinct ones (tree.grow_tree).
    Example: speculative_generate(target, ModelDrafter(draft, threshold=0.5), ids, gamma=8)
    """

    def __init__(self, model, threshold=None, branching=None, width=None, score_temperature=1.0,
                 replacement=True):
        if threshold is not None and not 0 <= real(threshold, "threshold") <= 1:
            raise ValueError(f"threshold must be in [0, 1] or None, got {threshold}")
        if threshold is not None and branching is not None:
            raise ValueError("threshold stops a chain; a tree (branching) does not take it")
        self.branching, self.width = check_tree_options(branching, width, score_temperature,
                                                        replacement)
        if not hasattr(model, "new_cache"):  # None; a name ("draft") not loaded yet
            raise ValueError(f"model must be a GPT or a Llama, got a {type(model).__name__}")
        self.replacement = replacement
        self.model = model
        self.vocab_size = model.config.vocab_size
        self.threshold = threshold
        self.score_temperature = score_temperature
        self.cache = None

    def reset(self, target=None, cache=None):  # twice block_size: room for a tree after the context
        self.cache = self.model.new_cache(size=2 * self.model.config.block_size)
        self.cached = []  # the token ids fed to the cache, in order (a tree's nodes not listed)

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        if self.cache is None:
            self.reset()
        if not all(type(t) is int for t in context):  # a tensor, numpy's ints, 2.5: one by one
            context = [whole(t, "each context token id", 0) for t in context]
        gamma = whole(gamma, "gamma (tokens to draft)", 0)
        cached = self.cached[:self.cache.length]  # any context may come, not only the last one's
        same = next((i for i, (a, b) in enumerate(zip(cached, context)) if a != b), len(cached))
        self.cache.crop(min(same, len(context) - 1))  # keep the prefix shared with this context
        self.cached = list(context)
        if self.branching is not None:
            tree, calls = grow_tree(self.expand, context, gamma, self.branching[:depth], self.width,
                                    temperature, top_k, top_p, generator, self.score_temperature,
                                    self.cache.size - len(context), self.replacement)
            self.calls += calls
            return tree
        tokens, qs = [], []
        new = context[self.cache.length:]  # catch up on the context, then one token a step
        while len(tokens) < (gamma if depth is None else min(gamma, depth)):
            idx = torch.tensor([new], device=self.model.wte.weight.device)
            logits = self.model(idx, self.cache)  # (1, T, V)
            self.calls += 1
            token, q = pick(logits[0, -1], temperature, top_k, top_p, generator)
            tokens.append(token)
            qs.append(q)
            if unsure(logits[0, -1], self.threshold):
                break  # the unsure token is still proposed: it may be right
            new = [token]
        self.cached += tokens  # the cache holds context + tokens[:-1]
        return Tree.chain(tokens, qs)

    def expand(self, context, fed, nodes):
        """For grow_tree: the draft's logits after nodes a..b-1 of `fed` (None: the context)."""
        return score_tree(self.model, self.cache, context, fed, nodes)[1]

    def accept(self, context, tree, path, hidden, logits):
        kept = len(path) if self.branching is None else 0  # a tree's path is fed again next round
        self.cache.crop(min(len(context) + kept, self.cache.length))


def tail_matches(context, max_n, min_n=1):
    """Earlier occurrences of the context's last n tokens, n = max_n down to min_n, newest first:
    yields (where the copy starts, just after the occurrence; n)."""
    for n in range(min(max_n, len(context) - 1), min_n - 1, -1):
        tail = context[-n:]
        for i in range(len(context) - n - 1, -1, -1):
            if context[i:i + n] == tail:
                yield i + n, n


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding (Saxena 2023; not one the survey centres on): no model, strong on
    code, which repeats. Match the context's last n-gram earlier in the context and copy what
    followed: the longest n in [min_n, max_n] with a match wins, and its most recent occurrence
    is proposed. The copy may run into its own output (as in LZ77), so a repeating pattern
    continues periodically. The guess is deterministic (no q): verification draws x ~ p and
    keeps the guess if x equals it.
    Example: PromptLookupDrafter(max_n=2).draft([5, 6, 7, 8, 5, 6], 3).tokens == [7, 8, 5]
    """

    def __init__(self, max_n=3, min_n=1):
        self.max_n = whole(max_n, "max_n")
        self.min_n = whole(min_n, "min_n")
        if self.min_n > self.max_n:
            raise ValueError(f"need min_n <= max_n, got min_n={min_n}, max_n={max_n}")

    def match(self, context, gamma):
        """gamma tokens that followed the latest earlier occurrence of the longest matching tail."""
        for start, _ in tail_matches(context, self.max_n, self.min_n):  # the first: longest, newest
            return [context[start + j % (len(context) - start)] for j in range(gamma)]  # its copy
        return []  # no match (or context shorter than min_n + 1): propose nothing

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        n = whole(gamma if depth is None else min(gamma, depth), "gamma (and depth)", 0)
        return Tree.chain(self.match(list(context), n))


def as_drafter(drafter, target):
    """A GPT becomes a ModelDrafter; anything else must be a Drafter of the target's vocabulary."""
    if isinstance(drafter, GPT):
        drafter = ModelDrafter(drafter)
    if not isinstance(drafter, Drafter):
        raise ValueError(f"drafter must be a GPT or a Drafter, got {type(drafter).__name__}")
    if drafter.vocab_size not in (None, (V := target.config.vocab_size)):
        raise ValueError(f"drafter vocab_size {drafter.vocab_size} != target vocab_size {V}")
    return drafter
