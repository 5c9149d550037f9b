"""Prompt lookup that learns the answer's edits: a correction made once is drafted the next time.

An answer that corrects a text ("teh" -> "the" throughout, a variable renamed) leaves the copied
text at every occurrence of the edited word. Prompt lookup drafts the source's token there, the
target rejects it, and the next round often finds no match, or a wrong one-token match: each
occurrence of the edit costs a round or two. The answer repeats its edits, so learn them: when the
answer leaves the copy (the target rejects a copied token, at source position s, answer position
o) and later rejoins it (lookup's n-gram match starts at source position e, a few tokens past s),
the source tokens s..e-1 were replaced by the answer's tokens from o up to the match. Remember that
edit; from then on, copying through those source tokens drafts their replacement (the longest
edit that matches). An edit is forgotten when the answer later leaves the copy there and writes the
source tokens themselves; insertions and deletions are not learnt (a deletion would drop every
later copy of its tokens); a rejected one-token guess does not move the gap, and an answer that
runs more than `span` tokens past the gap closes it. Drafting the
input being edited is input-guided aggressive decoding (Ge et al. 2022, for grammatical error
correction); remembering edits is minispec's own heuristic, designed on the spelling prompt of
benchmarks/real_model.py (its trace: lookup drafted " te"+"h" seven times where the answer wrote
" the") and checked on prompts written after it (benchmarks/lookup_runs.py's held-out set).

The guesses are deterministic (no q): verification draws x ~ p and keeps a guess equal to it, so
the loop stays lossless at any temperature (the edits depend only on past contexts and what was
kept).
"""
from ..drafters import Drafter, tail_matches
from ..sampling import whole
from ..tree import Tree
from .args import draft_args


class EditLookupDrafter(Drafter):
    """Prompt lookup (1- to max_n-grams, the newest occurrence of the longest) that replaces, in
    what it copies, every source span the answer has edited before (spans of at most `span`
    tokens on either side). Example: speculative_generate(target, EditLookupDrafter(), ids, 96,
    gamma=3)"""

    def __init__(self, max_n=3, span=3):
        self.max_n = whole(max_n, "max_n")
        self.span = whole(span, "span")
        self.reset(None, None)

    def reset(self, target=None, cache=None):
        self.edits = {}   # source tokens -> the answer's tokens in their place (tuples)
        self.gap = None   # (source position, answer position) where the answer left the copy
        self.plan = None  # this round's draft: (context length, n, tokens, source position of each)

    def learn(self, context, start, n):
        """The answer rejoins the copy: its last n tokens match the source at start - n. If that is
        a little past where it left (the gap), the source tokens in between became the answer's
        (an edit, learnt or replaced), or the answer kept them (an edit of them is forgotten). An
        answer that runs more than `span` tokens past the gap without rejoining closes it."""
        s, o = self.gap
        source, answer = tuple(context[s:start - n]), tuple(context[o:len(context) - n])
        if len(answer) > self.span:
            self.gap = None
        elif s <= start - n and len(source) <= self.span:
            if source == answer:
                self.edits.pop(source, None)
            elif source and answer:  # not learnt: insertions (no source), deletions (no answer)
                self.edits[source] = answer
            self.gap = None

    def copy(self, context, start, gamma):
        """gamma tokens copied from `start` (periodic past the context's end, as lookup's), each
        edited source span replaced (the longest that matches) -> (tokens, the source position of
        each, None inside a replacement)."""
        period = len(context) - start
        source = [context[start + j % period] for j in range(gamma + self.span)]
        tokens, where, j = [], [], 0
        while len(tokens) < gamma and j < len(source):
            here = [k for k in self.edits if tuple(source[j:j + len(k)]) == k]
            edit = max(here, key=len, default=None)
            if edit is None:
                tokens.append(source[j])
                where.append(start + j % period)
                j += 1
                continue
            tokens += self.edits[edit]
            where += [start + j % period] + [None] * (len(self.edits[edit]) - 1)
            j += len(edit)
        return tokens[:gamma], where[:gamma]

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context, gamma = draft_args(context, gamma, depth)
        start, n = next(tail_matches(context, self.max_n), (None, 0))  # lookup's: longest, newest
        self.plan = None
        if start is None or gamma == 0:
            return Tree.chain([])
        if self.gap is not None:
            self.learn(context, start, n)
        tokens, where = self.copy(context, start, gamma)
        self.plan = (len(context), n, tokens, where)
        return Tree.chain(tokens)

    def accept(self, context, tree, path, hidden, logits):
        plan, self.plan = self.plan, None  # this round's only: a later round may be another's
        if plan is None or plan[2] != tree.tokens or len(path) == len(tree.tokens):
            return  # nothing drafted (or another drafter's tree), or all kept: still on the copy
        length, n, _, where = plan
        left = where[len(path)]  # the source position the answer did not follow
        credible = len(path) > 0 or n > 1 or self.gap is None  # a missed 1-gram guess keeps a gap
        if left is not None and credible:
            self.gap = (left, length + len(path))
