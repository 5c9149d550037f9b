"""Jacobi and lookahead decoding (not ones the survey centres on; model-free, like prompt lookup).

Jacobi decoding (Santilli et al. 2023) guesses W tokens at once and lets the target's outputs on
them, shifted past what was accepted, be the next guesses; lookahead decoding (Fu et al. 2024)
also pools the n-grams seen along that trajectory and proposes those starting with the last token.
The guesses are deterministic (no q): verify.verify_tree draws x ~ p and keeps a guess equal to it.
"""
from ..drafters import Drafter
from ..sampling import whole
from ..tree import Tree
from .args import check_model, tree_args


class Lookahead(Drafter):
    """Draft the last token + W guesses (+ up to `candidates` pooled n-grams that start with it;
    candidates=0 is Jacobi decoding).
    Example: speculative_generate(target, Lookahead(target), ids)"""

    def __init__(self, model, window=4, ngram=3, candidates=3):
        self.model = check_model(model)  # the target it drafts for (its logits, in accept)
        self.window = whole(window, "window")
        self.ngram = whole(ngram, "ngram", 2)
        self.candidates = whole(candidates, "candidates", 0)
        self.reset(model, None)

    def reset(self, target=None, cache=None):
        self.guess, self.pool, self.hist = [], {}, []
        self.inputs = None  # this round's window, set by draft (None: another drafter drafted)

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        vocab = self.model.config.vocab_size  # its guesses repeat context tokens: in the vocabulary
        context, gamma, depth = tree_args(context, gamma, depth, root=True, vocab=vocab)
        self.W = min(self.window, gamma, gamma if depth is None else depth)
        self.inputs = [context[-1]] + (self.guess + [context[-1]] * self.W)[:self.W]
        grams = self.pool.get(context[-1], [])[-self.candidates:] if self.candidates else []
        return Tree.from_paths([self.inputs[1:]] + [list(c)[:depth] for c in grams], gamma)

    def accept(self, context, tree, path, hidden, logits):
        if self.inputs is None:  # another drafter (inside a FallbackDrafter) drafted this round
            self.guess = []
            return
        root = len(logits) - len(tree.tokens) - 1
        out = logits[root:root + self.W + 1].argmax(-1).tolist()  # after window node j (0: root)
        self._harvest(len(context) - 1, self.inputs, out)
        self.guess = out[len(path) + 1:]
        self.inputs = None

    def _harvest(self, start, inputs, out):
        """n-grams along the Jacobi trajectory: the inputs at P-n+2..P-1 in the previous n-2 rounds,
        this round's input at P and the target's output after it (lookahead's diagonals)."""
        n, cur = self.ngram, {start + j: t for j, t in enumerate(inputs)}
        for P, t in cur.items() if len(self.hist) >= n - 2 else ():
            gram = [self.hist[i - (n - 2)].get(P - (n - 2) + i) for i in range(n - 2)]
            gram += [t, out[P - start]]
            if None not in gram:  # the newest last, no repeats
                rest = tuple(gram[1:])
                self.pool[gram[0]] = [g for g in self.pool.get(gram[0], []) if g != rest] + [rest]
        self.hist = (self.hist + [cur])[-(n - 2):] if n > 2 else []
