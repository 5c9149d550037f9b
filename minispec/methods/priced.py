"""Lookup whose draft length is priced on this machine: the speedup formula, per match length.

Leviathan et al. (2023, section 3) price a round. If each drafted token is kept with probability
alpha, independently, k drafted tokens yield E[tokens] = 1 + alpha + ... + alpha^k, and the round
costs v(k + 1) one-token steps: c = 0, since lookup runs no model. MatchLengthDrafter fixes its
lengths for one cost profile: the loop's gamma (8 in the benchmarks) after a match of 6 tokens or
more, 3 after a shorter one. But v(k) belongs
to the kernel and the CPU as much as to the model. On one AMD EPYC, SmolLM2's v(4) read 1.00
through "packed", 1.14 through "rows" and 1.39 through "compact" (figures/kernel_baseline_zen4.md):
there 3 guesses that are rarely kept cost 0.39 of a step a round.

So this drafter prices every round. A copy's tokens are not independent: the longer the context's
tail that recurs earlier (the match, n tokens), the likelier the copy goes on, and every copied
token the target keeps makes the match one token longer. So the draft's i-th token is kept with
probability alpha at match n + i - 1 (counted up to `cap`), and

    E[tokens] = 1 + a_n + a_n a_(n+1) + ... + a_n a_(n+1) ... a_(n+k-1),   a_m = alpha_min(m, cap),

the formula above with alpha varying along the draft. The drafter drafts the k in 0..gamma with the
highest E[tokens] / v(k + 1); k = 0 is a round of plain decoding, so where guesses do not pay (free
writing through a fast kernel) it can stop guessing. Each alpha_m starts from a Beta(a, b) prior and
learns from the call's own rounds: every kept token was tried and kept at its match length, the
first rejected one tried there and lost,

    alpha_m = (a + tokens kept at m) / (a + b + tokens tried at m).

v comes from `costs`: seconds (or steps) of one forward over 1, 2, ... tokens (a draft is never
longer than the list prices: gamma + 1 of them cover the loop's gamma). Without it, `price(target)`
measures them (costs.step_costs, after a 256-token context, or less where the model's block is
smaller); the loop calls it at the first reset if nobody has.
Measure under the kernel that will decode (bridge.linear.kernel).

Measured against MatchLengthDrafter through "compact" on that CPU, in one run
(figures/real_model_zen4_compact.md): 1.31x at the copy median against the rule's 1.36x (beyond the
noise only on the spelling prompt, where the rule drafts 8 from its first long match and this
drafter starts near 3), 0.96-1.06x on free writing against 0.94-1.04x. The formula does not beat a
rule tuned on these prompts; it needs no tuning, and it follows the machine.

Lossless at any temperature: the guesses are the inner drafter's (deterministic, no q), and k
depends only on the past rounds, so verification keeps exactly the tokens the target would write.
Given `costs`, the drafts are deterministic too; measured costs vary from run to run, and so may
the draft lengths: never the tokens at temperature 0, nor their law at any temperature.
"""
from ..drafters import Drafter
from ..sampling import real, whole
from .args import draft_args
from .costs import step_costs
from .edit_lookup import EditLookupDrafter


def match_length(context, cap):
    """n: the longest tail of `context`, at most cap tokens, that occurs earlier in it (0: none).
    Example: match_length([1, 2, 3, 9, 2, 3], 6) == 2"""
    last, best = len(context) - 1, 0
    for end in range(last - 1, -1, -1):  # an earlier occurrence ending at `end`
        n = 0
        while n < cap and n <= end and context[end - n] == context[last - n]:
            n += 1
        best = max(best, n)
        if best == cap:
            break
    return best


class PricedDrafter(Drafter):
    """A copying drafter (the edit lookup by default) drafting, after each match of n tokens, the
    k in 0..gamma that maximises E[tokens] / v(k + 1), with the chance a copied token is kept at
    each match length (up to cap) learnt from the call's rounds.
    Example: speculative_generate(target, PricedDrafter().price(target), ids, 96, gamma=8)"""

    def __init__(self, drafter=None, costs=None, cap=8, prior=(1.0, 1.0)):
        self.drafter = EditLookupDrafter() if drafter is None else drafter
        if not isinstance(self.drafter, Drafter):
            raise ValueError(f"drafter must be a Drafter, got {type(self.drafter).__name__}")
        self.cap = whole(cap, "cap (the longest match length told apart)")
        if not (isinstance(prior, (tuple, list)) and len(prior) == 2
                and all(0 < real(x, "each of the prior's a, b") < float("inf") for x in prior)):
            raise ValueError(f"prior must be (a, b), two numbers > 0 (Beta(a, b)), got {prior!r}")
        self.prior = tuple(float(x) for x in prior)
        self.v = None if costs is None else self.steps(costs)
        self.vocab_size = self.drafter.vocab_size
        self.forget()  # not reset(): an inner drafter tied to its target waits for the loop's

    @staticmethod
    def steps(costs):
        """costs (a list or tuple: forwards over 1, 2, ... tokens) -> v, v[k - 1] = v(k)."""
        if not (isinstance(costs, (list, tuple)) and len(costs) >= 2):
            raise ValueError(f"costs must list the cost of a forward over 1, 2, ... tokens, at "
                             f"least two of them, got {costs!r:.60}")
        costs = [real(c, "each cost") for c in costs]
        if not all(0 < c < float("inf") for c in costs):
            raise ValueError(f"every cost must be > 0 and finite, got {costs}")
        return [c / costs[0] for c in costs]

    def price(self, target, max_gamma=8, reps=10):
        """Measure v(1..max_gamma + 1) on target, now (under the kernel in use) -> self: one forward
        over k new tokens after a 256-token context (less where the block is smaller), every k
        timed in turn (costs.step_costs), the median of `reps` sweeps after one to warm up."""
        ks = range(1, whole(max_gamma, "max_gamma") + 2)
        if target.config.block_size <= len(ks):
            raise ValueError(f"price times forwards over 1..{len(ks)} tokens after a context: "
                             f"block_size={target.config.block_size} is too short for max_gamma="
                             f"{max_gamma}; pass a smaller max_gamma, or costs=[...]")
        context = max(1, min(256, target.config.block_size - len(ks)))
        seconds = step_costs(target, ks, context, whole(reps, "reps"), warmup=1)
        self.v = self.steps([seconds[k] for k in ks])
        return self

    @property
    def calls(self):  # the inner drafter's forward passes
        return self.drafter.calls

    def reset(self, target=None, cache=None):
        if self.v is None and target is not None:
            self.price(target)
        self.forget()
        self.drafter.reset(target, cache)

    def forget(self):
        """A new prompt: no rounds counted, no draft of this drafter's own pending."""
        self.kept = [0] * (self.cap + 1)  # per match length m: tokens kept, tokens tried
        self.tried = [0] * (self.cap + 1)
        self.n = 0
        self.mine = None  # this round's draft, if this drafter drafted it (FallbackDrafter)

    def alpha(self, m):
        """alpha_m = (a + kept) / (a + b + tried) at match length m (cap: cap or more)."""
        a, b = self.prior
        m = min(m, self.cap)
        return (a + self.kept[m]) / (a + b + self.tried[m])

    def length(self, n, gamma):
        """The k in 0..gamma with the highest E[tokens] / v(k + 1) after a match of n tokens."""
        if self.v is None:
            raise ValueError("no cost profile: PricedDrafter(costs=...) or .price(target)")
        gamma = min(gamma, len(self.v) - 1)  # beyond the profile nothing is priced
        gains, expected, chain = [1.0], 1.0, 1.0  # k = 0: one token for one step
        for k in range(1, gamma + 1):
            chain *= self.alpha(n + k - 1)  # the first k guesses all kept
            expected += chain
            gains.append(expected / self.v[k])
        return gains.index(max(gains))  # the shortest of the best

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context, gamma = draft_args(context, gamma)  # depth: the inner drafter's, checked alike
        self.n = match_length(context, self.cap)
        k = self.length(self.n, gamma)
        tree = self.drafter.draft(context, k, temperature, top_k, top_p, generator, depth)
        self.mine = tree.tokens
        return tree

    def score(self, target, cache, context, tree):  # the inner one's: early exit reuses its work
        return self.drafter.score(target, cache, context, tree)

    def accept(self, context, tree, path, hidden, logits):
        mine, self.mine = self.mine, None  # this round's only: a later round may be another's
        self.drafter.accept(context, tree, path, hidden, logits)
        if tree.tokens != mine:
            return  # another drafter's round (a FallbackDrafter's): not tries of this one's copy
        kept = len(path)
        for i in range(kept + (kept < len(tree.tokens))):  # the kept ones, the first rejected
            m = min(self.n + i, self.cap)
            self.tried[m] += 1
            self.kept[m] += i < kept
