"""Lookup whose draft length follows its match: short after a short match, long after a long one.

Prompt lookup drafts gamma tokens whatever it matched. But how much of a copy the target keeps
depends on how much context the match shares. On the copy-heavy answers of SmolLM2-135M
(benchmarks/real_model.py's 9 prompts, greedy; figures/match_length.md), at the rounds where the
context's last 8 tokens or more occurred earlier in it, the answer went on to write 10.7 of the
15 tokens lookup would copy, on average (37 rounds; 68% of them 8 or more); where only the last
token matched, 0.68 (161 rounds; 77% of them none). A forward over 9 tokens costs little more
than one over 4 where a step is memory-bound (v(8) 1.15-1.5 steps on this CPU against v(4)
0.9-1.2, figures/lookup_ceiling.md), so a long match deserves a long draft and a short one a
short draft. SuffixDecoding (Oliaro et al. 2024) caps its drafts at a multiple of the match
length for the same reason; minispec's rule has two levels:

    tokens drafted = gamma             if the context's last `long` tokens occur earlier in it,
                     min(gamma, short)  if only a shorter tail does, two tokens or more,
                     min(gamma, single) if only the last token does (or none: nothing to copy),

where gamma is what the loop asks for (speculative_generate's gamma: pass the long length).
`long` = 6 and `short` = 3 = `single` (with gamma 8) were chosen by replaying lookup's rounds on
those 9 answers offline, priced with a cost profile near the one a decode measured (v(4) about
1.1), among a few rules (proportional caps as SuffixDecoding's among them). The 5 edit prompts that
benchmarks/lookup_runs.py holds out were replayed alongside, so for this rule they are not a clean
held-out set. The inner drafter (prompt lookup, or the edit lookup) chooses what to copy; this
wrapper only chooses how much. The guesses stay deterministic (no q): verification draws x ~ p and
keeps a guess equal to it, so the loop stays lossless at any temperature.

`single` prices the weakest match by the cost profile. A round drafting k tokens costs v(k + 1)
one-token steps, so its draft pays for itself where it keeps more than v(k + 1) - 1 tokens. After
a one-token match the answer keeps 0.43 of 3 copied tokens on the 9 prompts and 0.21 on 6
free-writing ones, and the first guess 23% and 13% of the time (prompt lookup's rounds,
figures/match_length.md). On the Intel Xeon of figures/lookup_ceiling_intel.md (v(2) 1.17, v(4)
1.34), 3 guesses there barely pay on the copy prompts (0.43 against 0.34) and lose on free writing
(0.21), where 1 guess loses less (0.13 against 0.17). `single` = 1 measured there: the lowest of
the 9 prompts from 0.96x to 1.05x and free writing from 0.97x to 1.01x at the median, the 9's
median from 1.33x to 1.29x (figures/lookup_intel_single.md). Where v(4) is near 1.1, 3 costs
little more than 1, and the default keeps 3.
"""
from ..drafters import Drafter, PromptLookupDrafter, tail_matches
from ..sampling import whole
from .args import draft_args


class MatchLengthDrafter(Drafter):
    """A copying drafter (PromptLookupDrafter by default) drafting the loop's gamma tokens after a
    match of at least `long` tokens, at most `short` after a shorter one of two or more, and at
    most `single` (default: `short`) after a one-token match (or none).
    Example: speculative_generate(target, MatchLengthDrafter(single=1), ids, 96, gamma=8)"""

    def __init__(self, drafter=None, short=3, long=6, single=None):
        self.drafter = PromptLookupDrafter() if drafter is None else drafter
        if not isinstance(self.drafter, Drafter):
            raise ValueError(f"drafter must be a Drafter, got {type(self.drafter).__name__}")
        self.short = whole(short, "short")
        self.long = whole(long, "long")
        self.single = self.short if single is None else whole(single, "single", low=0)
        self.vocab_size = self.drafter.vocab_size

    @property
    def calls(self):  # the inner drafter's forward passes
        return self.drafter.calls

    def reset(self, target=None, cache=None):
        self.drafter.reset(target, cache)

    @staticmethod
    def recurs(context, n):
        """Whether the context's last n tokens occur earlier in it."""
        return next(tail_matches(context, n, n), None) is not None

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context, gamma = draft_args(context, gamma)  # depth: the inner drafter's, checked alike
        depth = None if depth is None else whole(depth, "depth (None: any)", 0)
        if not self.recurs(context, self.long):
            gamma = min(gamma, self.short if self.recurs(context, 2) else self.single)
        return self.drafter.draft(context, gamma, temperature, top_k, top_p, generator, depth)

    def score(self, target, cache, context, tree):  # the inner one's: early exit reuses its work
        return self.drafter.score(target, cache, context, tree)

    def accept(self, context, tree, path, hidden, logits):
        self.drafter.accept(context, tree, path, hidden, logits)
