"""Prompt lookup with every match: the continuations of several earlier occurrences, as one tree.

Prompt lookup copies what followed the newest earlier occurrence of the context's last n-gram.
When the context holds several occurrences (a variable used on many lines, a word the text
repeats), they are followed by different tokens, and the newest is often not the one the answer
copies: an oracle that picked the right occurrence every round would price about 1.9x on SmolLM2's
copy-heavy answers where lookup prices 1.47-1.61x (figures/lookup_ceiling.md). The target can pick
instead: draft the continuations of up to `branches` occurrences, merged into a prefix tree
(shared first tokens become one node), and verify them all in one call (tree attention,
notebook 05); the round keeps the longest branch the target agrees with. Building a trie from
several retrieved continuations is what REST (He et al. 2023; not one the survey centres on)
does with a datastore; here the datastore is the context itself.

A tree of g nodes costs a forward over 1 + g tokens, v(1 + g) steps; it pays where v stays near 1
for a few more tokens (SmolLM2 on packed weights: v(9) about 1.3-1.5) and not where v climbs (the
tiny target on a CPU). The order sets which branches get nodes when the `gamma` budget runs out:
longer n-grams first, the newest occurrence first within an n, so the first branch is lookup's own
draft. The guesses are deterministic (no q): verification draws x ~ p and keeps a guess equal to
it, lossless at any temperature.
"""
from ..drafters import Drafter, tail_matches
from ..sampling import whole
from ..tree import Tree
from .args import draft_args


class LookupTreeDrafter(Drafter):
    """Up to `branches` distinct continuations, `length` tokens each, of the earlier occurrences of
    the context's last n-gram (n from max_n down to min_n), as a prefix tree of at most gamma
    nodes. Example: speculative_generate(target, LookupTreeDrafter(), ids, 96, gamma=8)"""

    def __init__(self, branches=4, length=4, max_n=3, min_n=1):
        self.branches = whole(branches, "branches")
        self.length = whole(length, "length")
        self.max_n = whole(max_n, "max_n")
        self.min_n = whole(min_n, "min_n")
        if self.min_n > self.max_n:
            raise ValueError(f"need min_n <= max_n, got min_n={min_n}, max_n={max_n}")

    def continuations(self, context, length):
        """The branches, in priority order: for n = max_n..min_n, for each earlier occurrence of
        the last n tokens, newest first, the `length` tokens after it (past the context's end the
        copy repeats with period len - i - n, as PromptLookupDrafter.match), skipping repeats."""
        paths = []
        for start, _ in tail_matches(context, self.max_n, self.min_n):
            path = [context[start + j % (len(context) - start)] for j in range(length)]
            if path not in paths:
                paths.append(path)
            if len(paths) == self.branches:
                return paths
        return paths

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        gamma = whole(gamma, "gamma (the tree's nodes)", low=0)  # None, -1: no budget at all
        context, length = draft_args(context, self.length, depth)
        return Tree.from_paths(self.continuations(context, length), gamma)
