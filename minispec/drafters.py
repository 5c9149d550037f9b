"""Drafters: the one protocol every drafting method follows (`Drafter`), and the independent drafters.

Speculative sampling is lossless for *any* draft distribution q, as long as each drafted token really
was drawn from the q that verification sees; a deterministic guess has no q (None).
Independent drafters here (survey section 2.1.1):
  * ModelDrafter: a small GPT drafting autoregressively, a chain (optionally stopped at the first
    unsure token) or a static / dynamic tree (tree.grow_tree). The shipped `draft`, or
    `draft_distilled`, the same network distilled on the target (DistillSpec, Zhou et al. 2024).
  * PromptLookupDrafter: no model at all (Saxena 2023, not in the survey). Find the last n tokens
    earlier in the context and propose what followed them there; strong on code, which repeats.
  * FallbackDrafter: ask one drafter, and another when the first has nothing.
`load_drafter(name, target)` builds every shipped method by name.
"""
import torch

from .model import GPT, load_model
from .sampling import probs, sample
from .tree import Tree, grow_tree, score_tree


class Drafter:
    """What the loop (speculate.speculative_generate) calls in every round. Subclasses implement draft.

    reset(target, cache): a new prompt; draft(...) -> a Tree of at most gamma drafted tokens;
    score(...): the round's ONE target call (default: tree.score_tree; early exit reuses its drafting);
    accept(...): after verification, the kept path and what the verification pass computed
    (heads and EAGLE read its hidden states, lookahead its logits).
    """

    vocab_size = None  # a drafter with its own vocabulary says so: it must equal the target's
    calls = 0          # draft forward passes so far

    def reset(self, target, cache):
        """A new prompt begins: forget all state."""

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depth=None):
        """context: list[int] -> Tree of at most gamma nodes, none deeper than depth (None: any depth; the
        loop passes the number of tokens still wanted, so a tree keeps gamma nodes to the end)."""
        raise NotImplementedError

    def score(self, target, cache, context, tree):
        """The verification pass: the target's last hidden states (T, C) and logits (T, V) of every token
        it read: the uncached end of the context, then the N nodes (the last 1 + N rows: root, nodes)."""
        return score_tree(target, cache, context, tree)

    def accept(self, context, tree, path, hidden, logits):
        """The target kept the nodes `path` of `tree` after `context` (context itself is not extended yet)."""


def unsure(logits, threshold):
    """The confidence stop: the drafter's max softmax is below threshold (never, for None)."""
    return threshold is not None and float(logits.softmax(-1).max()) < threshold


def pick(logits, qs, temperature, top_k, top_p, generator):
    """A draft step: append the draft's q to qs, return the token drawn from it (its argmax at temperature 0)."""
    qs.append(probs(logits, temperature, top_k, top_p).cpu())  # sampled with a CPU generator
    return sample(qs[-1], generator) if temperature > 0 else int(qs[-1].argmax())


class ModelDrafter(Drafter):
    """A small GPT drafting with its own KV cache. By default a chain of gamma tokens; threshold: end
    the chain after the first token whose max softmax is below it (transformers' confidence stop;
    the length then depends only on the drafts, so sampling stays lossless). branching / width /
    score_temperature: grow a tree of gamma nodes instead (tree.grow_tree).
    Example: speculative_generate(target, ModelDrafter(draft, threshold=0.5), ids, gamma=8)
    """

    def __init__(self, model, threshold=None, branching=None, width=None, score_temperature=1.0):
        if threshold is not None and not 0 <= threshold <= 1:
            raise ValueError(f"threshold must be in [0, 1] or None, got {threshold}")
        if branching is not None and (not branching or any(int(k) != k or k < 1 for k in branching)):
            raise ValueError(f"branching must be a non-empty tuple of integers >= 1, got {branching}")
        if (width is not None and width < 1) or not score_temperature > 0:
            raise ValueError(f"width must be >= 1 (or None) and score_temperature > 0, got {width}, {score_temperature}")
        self.model, self.vocab_size, self.threshold = model, model.config.vocab_size, threshold
        self.branching, self.width, self.score_temperature = branching, width, score_temperature
        self.cache = None

    def reset(self, target=None, cache=None):  # twice block_size entries: room for a tree next to the context
        self.cache = self.model.new_cache(size=2 * self.model.config.block_size)

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depth=None):
        if self.cache is None:
            self.reset()
        if self.branching is not None:
            return grow_tree(self, context, gamma, self.branching[:depth], self.width, temperature, top_k, top_p,
                             generator, self.score_temperature)
        tokens, qs = [], []
        new = context[self.cache.length:]  # catch up on what the target committed since last time
        for _ in range(gamma if depth is None else min(gamma, depth)):
            logits = self.model(torch.tensor([new], device=self.model.wte.weight.device), self.cache)[0, -1]  # (V,)
            self.calls += 1
            tokens.append(pick(logits, qs, temperature, top_k, top_p, generator))
            new = tokens[-1:]
            if unsure(logits, self.threshold):
                break  # the unsure token is still proposed: it may well be right
        return Tree.chain(tokens, qs)  # the cache holds context + tokens[:-1]

    def expand(self, context, fed, nodes):  # for grow_tree: the draft's logits after these nodes
        return score_tree(self.model, self.cache, context, fed, nodes)[1]

    def accept(self, context, tree, path, hidden, logits):
        kept = len(path) if self.branching is None else 0  # a tree's nodes are re-read along the kept path
        self.cache.crop(min(len(context) + kept, self.cache.length))


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding: match the context's last n-gram earlier in the context, copy what followed.

    The longest n in [min_n, max_n] with a match wins, and its most recent occurrence is proposed.
    The copy may run into its own output (as in LZ77), so a repeating pattern continues periodically.
    The guess is deterministic (q None): verification draws x ~ p and keeps the guess if x equals it.
    Example: PromptLookupDrafter(max_n=2).draft([5, 6, 7, 8, 5, 6], 3).tokens == [7, 8, 5]
    """

    def __init__(self, max_n=3, min_n=1):
        if int(min_n) != min_n or int(max_n) != max_n or not 1 <= min_n <= max_n:
            raise ValueError(f"need integers 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.max_n, self.min_n = int(max_n), int(min_n)

    def match(self, context, gamma):
        """gamma tokens that followed the most recent earlier occurrence of the longest matching tail."""
        for n in range(min(self.max_n, len(context) - 1), self.min_n - 1, -1):
            tail = context[-n:]
            for i in range(len(context) - n - 1, -1, -1):  # earlier occurrences, newest first
                if context[i:i + n] == tail:
                    buf = list(context)
                    for j in range(gamma):  # copy forward; past the end, copy the copy
                        buf.append(buf[i + n + j])
                    return buf[len(context):]
        return []  # no match (or context shorter than min_n + 1): propose nothing

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depth=None):
        return Tree.chain(self.match(list(context), gamma if depth is None else min(gamma, depth)))


class FallbackDrafter(Drafter):
    """Ask `first` (e.g. prompt lookup with min_n=3: long, free matches); if it drafts nothing, ask
    `then` for at most then_gamma tokens (a model draft is worth less per token and costs more).
    Example: FallbackDrafter(PromptLookupDrafter(min_n=3), ModelDrafter(load_model("draft")), then_gamma=4)
    """

    def __init__(self, first, then, then_gamma=None):
        self.first, self.then, self.then_gamma = first, then, then_gamma
        self.vocab_size = first.vocab_size or then.vocab_size

    @property
    def calls(self):
        return self.first.calls + self.then.calls

    def reset(self, target=None, cache=None):
        self.first.reset(target, cache), self.then.reset(target, cache)

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depth=None):
        tree, self.used = self.first.draft(context, gamma, temperature, top_k, top_p, generator, depth), self.first
        if not tree.tokens:
            self.used, gamma = self.then, min(gamma, self.then_gamma or gamma)
            tree = self.then.draft(context, gamma, temperature, top_k, top_p, generator, depth)
        return tree

    def score(self, target, cache, context, tree):  # the drafter that drafted may reuse its work (early exit)
        return self.used.score(target, cache, context, tree)

    def accept(self, context, tree, path, hidden, logits):  # both: feature readers (heads, EAGLE) keep up
        self.first.accept(context, tree, path, hidden, logits), self.then.accept(context, tree, path, hidden, logits)


def as_drafter(drafter, target):
    """A GPT becomes a ModelDrafter; anything else must be a Drafter with the target's vocabulary."""
    if isinstance(drafter, GPT):
        drafter = ModelDrafter(drafter)
    if not isinstance(drafter, Drafter):
        raise ValueError(f"drafter must be a GPT or a Drafter, got {type(drafter).__name__}")
    if drafter.vocab_size is not None and drafter.vocab_size != target.config.vocab_size:
        raise ValueError(f"drafter vocab_size {drafter.vocab_size} != target vocab_size {target.config.vocab_size}")
    return drafter


def load_drafter(name, target, **options):
    """Every shipped method by name, ready for speculative_generate(target, drafter, ...):
    "draft", "draft_distilled" (ModelDrafter options), "lookup" (PromptLookupDrafter), "early_exit"
    (EarlyExitDrafter, default k=2), "medusa", "hydra" (HeadDrafter on the shipped heads, each with
    its default static tree), "eagle" (EagleDrafter, an EAGLE-2 dynamic tree).
    Example: load_drafter("hydra", load_model("target"))
    """
    from . import eagle, selfspec
    makers = {"draft": lambda: ModelDrafter(load_model("draft"), **options),
              "draft_distilled": lambda: ModelDrafter(load_model("draft_distilled"), **options),
              "lookup": lambda: PromptLookupDrafter(**options),
              "early_exit": lambda: selfspec.EarlyExitDrafter(target, **{"k": 2, **options}),
              "medusa": lambda: selfspec.HeadDrafter(selfspec.load_heads(target, "medusa"), **options),
              "hydra": lambda: selfspec.HeadDrafter(selfspec.load_heads(target, "hydra"), **options),
              "eagle": lambda: eagle.EagleDrafter(eagle.load_eagle(target), **options)}
    if name not in makers:
        raise ValueError(f"unknown drafter {name!r}: shipped drafters are {sorted(makers)}")
    return as_drafter(makers[name](), target)
