"""Two drafters, one after the other: ask `first`, and if it drafts nothing, ask `then`."""
from ..drafters import Drafter, ModelDrafter
from ..model import GPT
from ..sampling import whole
from .args import tree_args


class FallbackDrafter(Drafter):
    """Ask `first` (e.g. prompt lookup with min_n=3: long, free matches); if it drafts nothing,
    ask `then` for at most then_gamma tokens (a model draft is worth less a token and costs more).
    Example: FallbackDrafter(PromptLookupDrafter(min_n=3), ModelDrafter(load_model("draft")), 4)
    """

    def __init__(self, first, then, then_gamma=None):
        first, then = (ModelDrafter(d) if isinstance(d, GPT) else d for d in (first, then))
        if not (isinstance(first, Drafter) and isinstance(then, Drafter)):
            raise ValueError(f"first and then must be Drafters or GPTs, got "
                             f"{type(first).__name__} and {type(then).__name__}")
        if first is then:  # it would draft twice a round, and keep up twice with the target
            raise ValueError("first and then are the same drafter: give two, or use it alone")
        self.first = first
        self.then = then
        self.then_gamma = None if then_gamma is None else whole(then_gamma, "then_gamma (or None)")
        if first.vocab_size and then.vocab_size and first.vocab_size != then.vocab_size:
            raise ValueError(f"first drafts from {first.vocab_size} tokens, then from "
                             f"{then.vocab_size}: both must share the target's vocabulary")
        self.vocab_size = first.vocab_size or then.vocab_size
        self.used = first  # the drafter of this round: it scores (early exit reuses its work)

    @property
    def calls(self):
        return self.first.calls + self.then.calls

    def reset(self, target=None, cache=None):
        self.first.reset(target, cache)
        self.then.reset(target, cache)

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context, gamma, depth = tree_args(context, gamma, depth)
        tree = self.first.draft(context, gamma, temperature, top_k, top_p, generator, depth)
        self.used = self.first if tree.tokens else self.then
        if self.used is self.then:
            gamma = min(gamma, self.then_gamma or gamma)
            tree = self.then.draft(context, gamma, temperature, top_k, top_p, generator, depth)
        return tree

    def score(self, target, cache, context, tree):
        return self.used.score(target, cache, context, tree)

    def accept(self, context, tree, path, hidden, logits):  # both: feature readers keep up
        self.first.accept(context, tree, path, hidden, logits)
        self.then.accept(context, tree, path, hidden, logits)
