"""Copying with edits: prompt lookup that keeps its place in the text it copies.

An answer that edits a given text (correct its spelling, make it polite, rename a variable) copies
that text in order, with a few words changed, added or dropped. Prompt lookup finds its place anew
every round from the context's last 1-3 tokens. Right after an edit those tokens are new: lookup
finds no match, or a one-token match somewhere else ("the", a newline), which is usually wrong.
This drafter remembers where its last copy came from and how many of those tokens the target kept
(its cursor), so after an edit it looks for the last token a few tokens past the cursor (a word
replaced or dropped) and copies on from there. Drafting the input in order is the idea of
input-guided aggressive decoding (Ge et al. 2022, for grammatical error correction); the cursor,
its window and the one-token rule below are minispec's own heuristics, chosen on the copy-heavy
prompts of benchmarks/real_model.py (figures/lookup_ceiling.md). The guesses are deterministic
(no q), as lookup's: verification draws x ~ p and keeps a guess equal to it, so the loop stays
lossless at any temperature (the cursor depends only on past contexts and what was kept).

Each round the first rule that finds something drafts:
  1. a 2- to max_n-gram match (lookup's rule, its newest occurrence): gamma tokens;
  2. the context's last token among the `window` tokens from the cursor on (the one nearest the
     cursor; the window stops short of the last token itself): gamma tokens from after it;
  3. a 1-gram match (its newest occurrence): one token only, weak evidence (a forward over 2
     tokens costs about what one over 1 does on the CPU of figures/lookup_ceiling.md).
The cursor follows every draft, a rejected one-token guess included, so an edited word that
occurs earlier in the context moves it away from the copied text; rule 2 then looks in the wrong
place until a 2- or 3-gram match moves it again.
"""
from ..drafters import Drafter, tail_matches
from ..sampling import whole
from ..tree import Tree
from .args import draft_args


class CopyCursorDrafter(Drafter):
    """Prompt lookup with a cursor in the copied text (rules above).
    Example: speculative_generate(target, CopyCursorDrafter(), ids, 96, gamma=3)"""

    def __init__(self, window=8, max_n=3):
        self.window = whole(window, "window")
        self.max_n = whole(max_n, "max_n", 2)
        self.reset(None, None)

    def reset(self, target=None, cache=None):
        self.cursor = None  # where in the context the next copied token is expected
        self.source = None  # where this round's draft was copied from (None: nothing drafted)

    def find(self, context, gamma):
        """The three rules -> (where the draft is copied from, how many tokens), or (None, 0)."""
        for start, _ in tail_matches(context, self.max_n, 2):  # lookup's rule, 2-grams and up
            return start, gamma
        if self.cursor is not None and context:
            ahead = context[self.cursor:min(self.cursor + self.window, len(context) - 1)]
            if context[-1] in ahead:
                return self.cursor + ahead.index(context[-1]) + 1, gamma
        for i in range(len(context) - 2, -1, -1):
            if context[i] == context[-1]:
                return i + 1, min(gamma, 1)
        return None, 0

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context, gamma = draft_args(context, gamma, depth)
        self.source, n = self.find(context, gamma)
        if n == 0:  # nothing found, or nothing wanted (depth 0): the cursor stays where it is
            self.source = None
            return Tree.chain([])
        period = len(context) - self.source  # a copy running into its own output repeats (LZ77)
        return Tree.chain([context[self.source + j % period] for j in range(n)])

    def accept(self, context, tree, path, hidden, logits):
        if self.source is not None:  # the target kept len(path) copied tokens: the cursor follows
            self.cursor = self.source + len(path)
        self.source = None
