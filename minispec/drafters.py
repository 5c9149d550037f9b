"""Drafters: the one protocol every drafting method follows (`Drafter`), and the independent drafters
(survey section 2.1.1): ModelDrafter, PromptLookupDrafter and FallbackDrafter; `load_drafter(name, target)`
builds every shipped method by name.
"""
import torch

from .model import GPT, load_model
from .sampling import probs, sample
from .batch import feed
from .tree import Tree, check_tree_options, grow_tree, score_tree, score_trees


class Drafter:
    """What the loop (speculate.speculative_generate) calls: reset, then draft, score and accept every round;
    subclasses implement draft. Speculative sampling is lossless for *any* draft distribution q, as long as
    each drafted token really was drawn from the q that verification sees (a deterministic guess has q None).
    For a batch of prompts the loop calls the *_rows versions (one list entry per row); by default they serve
    one row: a drafter that can serve many sets `batched` (and overrides what must be shared)."""

    vocab_size = None  # a drafter with its own vocabulary says so: it must equal the target's
    calls = 0          # draft forward passes so far
    batched = False    # draft_rows / score_rows / accept_rows take several rows

    def reset(self, target, cache):
        """A new prompt begins: forget all state."""

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depth=None):
        """context: list[int] -> Tree of at most gamma nodes, none deeper than depth (None: any depth; the loop
        passes the tokens still wanted minus the one the target adds, so a tree keeps gamma nodes to the end)."""
        raise NotImplementedError

    def score(self, target, cache, context, tree):
        """The round's ONE target call (early exit overrides it to reuse its drafting): the target's last hidden
        states (T, C) and logits (T, V) of the uncached context end, then the N nodes (last 1 + N rows: root, nodes)."""
        return score_tree(target, cache, context, tree)

    def accept(self, context, tree, path, hidden, logits):
        """The target kept the nodes `path` of `tree` after `context` (context itself is not extended yet);
        hidden, logits: what score computed (heads and EAGLE read the hidden states, lookahead the logits)."""

    def draft_rows(self, contexts, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depths=None):
        """One Tree per row (depths[b]: tokens row b still wants, minus one; 0 drafts nothing)."""
        return [self.draft(c, 0 if d == 0 else gamma, temperature, top_k, top_p, generator, d)
                for c, d in zip(contexts, depths or [None] * len(contexts))]

    def score_rows(self, target, cache, contexts, trees):  # -> per row: hidden (T_b, C), logits (T_b, V)
        if len(contexts) > 1:
            return score_trees(target, cache, contexts, trees)  # one target call for the whole batch
        h, logits = self.score(target, cache, contexts[0], trees[0])
        return [h], [logits]

    def accept_rows(self, contexts, trees, paths, hidden, logits):
        for row in zip(contexts, trees, paths, hidden, logits):
            self.accept(*row)


def unsure(logits, threshold):
    """The confidence stop: the drafter's max softmax is below threshold (never, for None)."""
    return threshold is not None and float(logits.softmax(-1).max()) < threshold


def pick(logits, qs, temperature, top_k, top_p, generator):
    """A draft step: append the draft's q to qs, return the token drawn from it (its argmax at temperature 0)."""
    qs.append(probs(logits, temperature, top_k, top_p).cpu())  # sampled with a CPU generator
    return sample(qs[-1], generator) if temperature > 0 else int(qs[-1].argmax())


class ModelDrafter(Drafter):
    """A small GPT drafting autoregressively with its own KV cache. By default a chain of gamma tokens;
    threshold: end the chain after the first token whose max softmax is below it (transformers'
    assistant_confidence_threshold, without its auto-tuning; the length then depends only on the drafts, so
    sampling stays lossless). branching / width / score_temperature: a static or dynamic tree of gamma
    nodes instead (tree.grow_tree).
    Example: speculative_generate(target, ModelDrafter(draft, threshold=0.5), ids, gamma=8)
    """

    def __init__(self, model, threshold=None, branching=None, width=None, score_temperature=1.0):
        if threshold is not None and not 0 <= threshold <= 1:
            raise ValueError(f"threshold must be in [0, 1] or None, got {threshold}")
        check_tree_options(branching, width, score_temperature)
        self.model, self.vocab_size, self.threshold = model, model.config.vocab_size, threshold
        self.branching, self.width, self.score_temperature = branching, width, score_temperature
        self.batched = branching is None  # chains batch; a tree drafts one row at a time
        self.cache = None

    def reset(self, target=None, cache=None):  # twice block_size entries: room for a tree next to the context
        rows = 1 if cache is None else cache.k.shape[1]  # one row per row of the target's cache
        self.cache = self.model.new_cache(rows, size=2 * self.model.config.block_size)

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depth=None):
        if self.cache is None:
            self.reset()
        if self.branching is not None:
            return grow_tree(self, context, gamma, self.branching[:depth], self.width, temperature, top_k, top_p,
                             generator, self.score_temperature)
        return self.chains([context], gamma, temperature, top_k, top_p, generator, [depth])[0]

    def draft_rows(self, contexts, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depths=None):
        if len(contexts) == 1:  # through draft: one prompt is the plain case (and subclasses may override draft)
            return super().draft_rows(contexts, gamma, temperature, top_k, top_p, generator, depths)
        return self.chains(contexts, gamma, temperature, top_k, top_p, generator, depths)

    @torch.inference_mode()
    def chains(self, contexts, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depths=None):
        """Every row's chain, one draft call per step for all rows still drafting (batch.feed)."""
        n = [gamma if d is None else min(gamma, d) for d in depths or [None] * len(contexts)]  # tokens per row
        tokens, qs = [[] for _ in contexts], [[] for _ in contexts]
        new = [c[L:] if k else [] for c, L, k in zip(contexts, self.cache.lengths, n)]  # catch up on the context
        while any(new):
            logits = feed(self.model, self.cache, new)[1]  # (B, T, V)
            self.calls += 1
            for b, seq in enumerate(new):
                if seq:
                    tokens[b].append(pick(logits[b, len(seq) - 1], qs[b], temperature, top_k, top_p, generator))
                    done = len(tokens[b]) == n[b] or unsure(logits[b, len(seq) - 1], self.threshold)
                    new[b] = [] if done else tokens[b][-1:]  # the unsure token is still proposed: it may be right
        return [Tree.chain(t, q) for t, q in zip(tokens, qs)]  # the cache holds context + tokens[:-1]

    def expand(self, context, fed, nodes):  # for grow_tree: the draft's logits after these nodes
        return score_tree(self.model, self.cache, context, fed, nodes)[1]

    def accept_rows(self, contexts, trees, paths, hidden, logits):
        kept = [len(p) if self.branching is None else 0 for p in paths]  # a tree's nodes are re-read along the path
        self.cache.crop([min(len(c) + k, L) for c, k, L in zip(contexts, kept, self.cache.lengths)])

    def accept(self, context, tree, path, hidden, logits):
        self.accept_rows([context], [tree], [path], [hidden], [logits])


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding (Saxena 2023; not one the survey centres on): no model, strong on code, which repeats.

    Match the context's last n-gram earlier in the context and copy what followed: the longest n in
    [min_n, max_n] with a match wins, and its most recent occurrence is proposed. The copy may run into its
    own output (as in LZ77), so a repeating pattern continues periodically.
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
                if context[i:i + n] == tail:  # copy what followed; past the end the copy repeats, period len - i - n
                    return [context[i + n + j % (len(context) - i - n)] for j in range(gamma)]
        return []  # no match (or context shorter than min_n + 1): propose nothing

    batched = True  # no state: each row looks up its own context

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depth=None):
        return Tree.chain(self.match(list(context), gamma if depth is None else min(gamma, depth)))


class FallbackDrafter(Drafter):
    """Ask `first` (e.g. prompt lookup with min_n=3: long, free matches); if it drafts nothing, ask
    `then` for at most then_gamma tokens (a model draft is worth less per token and costs more).
    Example: FallbackDrafter(PromptLookupDrafter(min_n=3), ModelDrafter(load_model("draft")), then_gamma=4)
    """

    def __init__(self, first, then, then_gamma=None):
        first, then = (ModelDrafter(d) if isinstance(d, GPT) else d for d in (first, then))  # a GPT drafts a chain
        if not (isinstance(first, Drafter) and isinstance(then, Drafter)):
            raise ValueError(f"first and then must be Drafters or GPTs, got {type(first).__name__} and "
                             f"{type(then).__name__}")
        self.first, self.then, self.then_gamma = first, then, then_gamma
        self.vocab_size, self.batched = first.vocab_size or then.vocab_size, first.batched and then.batched

    @property
    def calls(self):
        return self.first.calls + self.then.calls

    def reset(self, target=None, cache=None):
        self.first.reset(target, cache), self.then.reset(target, cache)

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depth=None):
        return self.draft_rows([context], gamma, temperature, top_k, top_p, generator, [depth])[0]

    def draft_rows(self, contexts, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depths=None):
        depths = depths or [None] * len(contexts)
        trees = self.first.draft_rows(contexts, gamma, temperature, top_k, top_p, generator, depths)
        self.used = [self.first if t.tokens else self.then for t in trees]
        if self.then in self.used:  # the rows `first` left empty (the others draft nothing: depth 0)
            rest = [d if u is self.then else 0 for d, u in zip(depths, self.used)]
            more = self.then.draft_rows(contexts, min(gamma, self.then_gamma or gamma), temperature, top_k, top_p,
                                        generator, rest)
            trees = [m if u is self.then else t for t, m, u in zip(trees, more, self.used)]
        return trees

    def score(self, target, cache, context, tree):  # the drafter that drafted may reuse its work (early exit)
        return self.used[0].score(target, cache, context, tree)

    def accept_rows(self, contexts, trees, paths, hidden, logits):  # both: feature readers (heads, EAGLE) keep up
        self.first.accept_rows(contexts, trees, paths, hidden, logits)
        self.then.accept_rows(contexts, trees, paths, hidden, logits)


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
    """Every shipped method by name, ready for speculative_generate(target, drafter, ...): "draft" and
    "draft_distilled" (the same network distilled on the target: DistillSpec, Zhou et al. 2024), both with
    ModelDrafter options; "lookup" (PromptLookupDrafter); "early_exit" (EarlyExitDrafter, default k=2);
    "medusa", "hydra" (HeadDrafter on the shipped heads, each with its default static tree); "eagle"
    (EagleDrafter: a chain, or EAGLE-2 dynamic trees given branching and width).
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
    try:
        return as_drafter(makers[name](), target)
    except TypeError as e:  # an option this drafter does not take
        raise ValueError(f"load_drafter({name!r}, ...): {e}") from None
