"""Draft beam search (survey section 3.1.2, search optimisation): the draft searches for its most
probable continuations, and the best beams, merged into a prefix tree, are proposed as guesses.

Beam search keeps the `width` sequences y_1..y_d with the highest draft log-probability
    s(y_1..y_d) = sum_i log q(y_i | context, y_1..y_{i-1}),
extending each by one token per step and keeping the best `width` of all extensions, for `depth`
steps. Its beams are the draft's best guesses at whole continuations, not draws: the tree holds
no q (Tree.from_paths), like prompt lookup's guesses and Medusa's. All beams of a depth are fed to
the draft together, with tree attention (tree.score_tree): one draft call per depth.
"""
import torch

from ..drafters import Drafter
from ..sampling import whole
from ..tree import Tree, score_tree
from .args import check_model, common_prefix, tree_args


class BeamDrafter(Drafter):
    """Beam search of `width` beams, `depth` tokens deep, with a draft model; the beams, best score
    first, make a prefix tree trimmed to gamma nodes (a beam that no longer fits is cut where the
    budget ends). width=1 is the draft's greedy chain, as guesses.

    Lossless at any temperature, by the guess rule (verify.verify_tree): at each node verification
    draws x ~ p, the target's own distribution after the kept path, and keeps the child equal to x
    if there is one, else emits x and stops. Every emitted token is such a draw, and the beams are
    a function of the context alone (never of the target's draws), so the output follows p whatever
    the beams are; they only decide how many draws one target call yields. The price at T > 0: a
    guess x is kept with probability p(x), a token sampled from q with min(1, p(x)/q(x)), on
    average 1 - TV(p, q): guesses lose where p is spread and q close to it. At T = 0 a guess is
    kept if it is the target's argmax: the output is the target's greedy text.
    The search ignores temperature, top-k and top-p: it reads the draft's raw log-probabilities,
    and verification draws from the warped p whatever the guesses are.
    Example: speculative_generate(target, BeamDrafter(load_model("draft"), 4, 4), ids, gamma=8)
    """

    def __init__(self, model, width=4, depth=4):
        self.model = check_model(model)
        self.width = whole(width, "width (beams kept per step)")
        self.depth = whole(depth, "depth (tokens per beam)")
        self.vocab_size = model.config.vocab_size
        self.cache = None

    def reset(self, target=None, cache=None):  # twice block_size: room for the beams' nodes
        self.cache = self.model.new_cache(size=2 * self.model.config.block_size)
        self.cached = []  # the context the cache holds (the beams' nodes are dropped each round)

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context, gamma, depth = tree_args(context, gamma, depth, root=True)
        if self.cache is None:
            self.reset()
        D = min(self.depth, gamma, self.depth if depth is None else depth)
        if D < 1:
            return Tree()
        self.cache.crop(min(common_prefix(self.cached, context), len(context) - 1))  # kept: shared
        self.cached = list(context)
        room = self.cache.size - len(context)  # the beams' nodes fed to the draft must fit
        D = min(D, 1 + room // self.width)
        beams = self.search(context, D)
        self.cache.crop(len(context))
        return Tree.from_paths(beams, gamma)  # best first: the budget goes to the best beams

    def search(self, context, D):
        """Beam search, D tokens deep -> the beams (lists of tokens), best score first."""
        fed = Tree()  # the beams' prefixes the draft has read, as a tree after the context
        logits = score_tree(self.model, self.cache, context, fed)[1][-1:]  # (1, V) at the root
        self.calls += 1
        scores = torch.zeros(1, dtype=torch.float64)  # s of each beam (the empty one at first)
        nodes, beams = [-1], [[]]  # each beam's last node in `fed`, and its tokens
        for d in range(D):
            # s(y_1..y_d, x) = s(y_1..y_d) + log q(x | ...): the best `width` of every extension
            total = scores[:, None] + torch.log_softmax(logits.double(), -1).cpu()  # (B, V)
            scores, best = total.flatten().topk(min(self.width, total.numel()))
            V = total.shape[1]
            parent = (best // V).tolist()
            tokens = (best % V).tolist()
            beams = [beams[b] + [t] for b, t in zip(parent, tokens)]
            if d == D - 1:
                return beams  # topk sorted them, best first
            nodes = [fed.add(nodes[b], t) for b, t in zip(parent, tokens)]
            n = len(fed.tokens)
            logits = score_tree(self.model, self.cache, context, fed, (n - len(nodes), n))[1]
            logits = logits[-len(nodes):]  # (B, V): after each beam
            self.calls += 1
