"""Token trees: every draft is a tree (a chain is a tree with one branch), scored in ONE call.

N drafted tokens hang below the root, the last token of the context; node i holds a token and its
parent (-1: the root), parents before children. To score every node in one forward pass
(SpecInfer, Miao et al. 2024; Medusa, Cai et al. 2024) the target gets
  * position ids: a node at depth d sits at position len(context) - 1 + d, whatever its branch;
  * a tree attention mask: a node attends to the whole context, its ancestors and itself only,
so the logits at node i are exactly those of the plain sequence context + (root-to-i path).
Static trees expand every node by a fixed branching per depth (Medusa's, Sequoia's are sparser);
dynamic trees grow only where the draft is most confident (EAGLE-2, Li et al. 2024): `grow_tree`.
"""
from dataclasses import dataclass, field

import torch

from .sampling import probs, real, whole


@dataclass
class Tree:
    tokens: list = field(default_factory=list)   # (N,) the drafted token of each node
    parents: list = field(default_factory=list)  # (N,) index of the parent node, -1 for the root
    scores: list = field(default_factory=list)   # (N,) path probability under the draft
    cands: dict = field(default_factory=dict)    # node (-1: root) -> its children's draws, repeats
    q: dict = field(default_factory=dict)        # node -> the q (V,) they came from; None: guesses
    kids: dict = field(default_factory=dict)     # node -> {token: child index}
    replacement: bool = True  # False: each node's children were drawn without replacement

    def __post_init__(self):  # Tree(tokens, parents) written by hand: add indexes its children
        if len(self.tokens) and not self.kids:  # zip's strict: a token without a parent: error
            nodes = zip(self.tokens, self.parents, self.scores or [1.0] * len(self.tokens),
                        strict=True)
            self.tokens, self.parents, self.scores, new = [], [], [], {-1: -1}  # new: renumbering
            for i, (token, parent, score) in enumerate(nodes):  # a repeated sibling merges: its
                new[i] = self.add(new.get(parent, parent), token, score)  # children follow it

    def children(self, node):
        """{token: child index} of a node (-1 for the root); it only reads (a leaf's is empty)."""
        return self.kids.get(node, {})

    def score(self, node):
        """The path probability of a node (the root's is 1)."""
        return self.scores[node] if node >= 0 else 1.0

    def add(self, parent, token, score=1.0):
        """Append a child (or return the existing one with that token): its index."""
        token = whole(token, "a drafted token", 0)  # a 0-d tensor would never equal an int
        parent = whole(parent, "a parent (-1: the root, or an earlier node)", -1, len(self.tokens))
        if token not in self.children(parent):
            self.kids.setdefault(parent, {})[token] = len(self.tokens)
            self.tokens.append(token)
            self.parents.append(parent)
            self.scores.append(score)
        return self.children(parent)[token]

    @classmethod
    def chain(cls, tokens, q=None):
        """A chain: token d drawn from q[d] (V,), or deterministic guesses (q None)."""
        tree = cls()
        for d, t in enumerate(tokens):
            tree.cands[d - 1] = [t]
            tree.q[d - 1] = None if q is None else q[d]
            tree.add(d - 1, t)
        return tree

    @classmethod
    def from_paths(cls, paths, size=None):
        """The prefix tree of deterministic token paths (at most `size` nodes)."""
        tree, size = cls(), size if size is None else whole(size, "size (nodes, or None)", 0)
        for path in paths:
            node = -1
            for t in path:
                if len(tree.tokens) == size and t not in tree.children(node):
                    break
                node = tree.add(node, t)
        tree.cands = {n: list(tree.children(n)) for n in range(-1, len(tree.tokens))}
        tree.q = dict.fromkeys(tree.cands)
        return tree

    def depths(self):
        d = []
        for par in self.parents:
            d.append(1 + (d[par] if par >= 0 else 0))
        return torch.tensor(d, dtype=torch.long)  # (N,)

    def select(self, keep):
        """The subtree made of the nodes in `keep` (closed under parents), renumbered."""
        new, tree, n = {-1: -1}, Tree(replacement=self.replacement), len(self.tokens)
        for i in sorted(whole(i, f"each node to keep (of {n})", 0, n) for i in keep):
            if self.parents[i] not in new:  # its path to the root would break
                raise ValueError(f"keep holds node {i} but not its parent {self.parents[i]}")
            new[i] = tree.add(new[self.parents[i]], self.tokens[i], self.scores[i])
        tree.cands = {new[n]: v for n, v in self.cands.items() if n in new}
        tree.q = {new[n]: v for n, v in self.q.items() if n in new}
        return tree


def tree_mask(parents, n_ctx, n_prefix=0, nodes=None):
    """Attention mask (T, n_ctx + b): node i sees the context, its ancestors and itself. Rows: the
    last n_prefix context tokens (causal), then nodes a..b-1 (nodes=(a, b), default all), fed when
    the cache holds the rest of the context and nodes 0..a-1. Example: tree_mask([-1, -1, 0], 2)
    """
    a, b = nodes or (0, len(parents))
    anc = torch.eye(len(parents), dtype=torch.bool)  # anc[i, j]: j is i or an ancestor of i
    for i, par in enumerate(parents):  # parents come first: anc[par] is complete
        par = whole(par, f"node {i}'s parent (-1: the root, or a node before it)", -1, i)
        anc[i] |= anc[par] if par >= 0 else False
    top = torch.ones(n_prefix, n_ctx + b, dtype=torch.bool).tril(n_ctx - n_prefix)  # causal rows
    bottom = torch.cat([torch.ones(b - a, n_ctx, dtype=torch.bool), anc[a:b, :b]], 1)
    return torch.cat([top, bottom])  # (n_prefix + b - a, n_ctx + b)


def score_tree(model, cache, context, tree, nodes=None):
    """One forward over the uncached end of `context`, then the tree's nodes a..b-1 (nodes=(a, b),
    default all) -> ln_f(h_N) (T, C) and the logits (T, V) of every token fed: the last 1 + b - a
    rows are the root's (if it was fed) and the nodes'."""
    prefix, n, dev = context[cache.length:], len(context), model.wte.weight.device
    a, b = nodes or (0, len(tree.tokens))
    idx = torch.tensor([prefix + tree.tokens[a:b]], device=dev)
    pos = mask = None  # a chain needs no tree mask: consecutive positions, causal attention
    if tree.parents != list(range(-1, len(tree.parents) - 1)):
        pos = torch.cat([torch.arange(n - len(prefix), n), n - 1 + tree.depths()[a:b]]).to(dev)
        mask = tree_mask(tree.parents, n, len(prefix), (a, b)).to(dev)
    h = model.features(idx, cache, pos, mask)[0]
    return h, model.lm_head(h)


def check_tree_options(branching, width, score_temperature, replacement=True):
    """Tree options (branching None: a chain) -> (branching, width) as ints, or a ValueError."""
    if branching is None and (width, replacement, score_temperature) != (None, True, 1.0):
        raise ValueError(f"tree options (score_temperature={score_temperature}, width={width}, "
                         f"replacement={replacement}) need branching")
    if branching is not None and not (isinstance(branching, (tuple, list)) and branching):
        raise ValueError(f"branching must be a non-empty tuple of integers >= 1, got {branching!r}")
    if not isinstance(replacement, bool):  # torch.multinomial takes only a bool
        raise ValueError(f"replacement must be True or False, got {replacement!r}")
    if not 0 < real(score_temperature, "score_temperature") < float("inf"):
        raise ValueError(f"score_temperature must be finite and > 0, got {score_temperature}")
    width = None if width is None else whole(width, "width")
    return branching and tuple(whole(k, "every branching[d]") for k in branching), width


@torch.inference_mode()
def grow_tree(expand, context, gamma, branching=(4, 2, 2, 1), width=None, temperature=0.0,
              top_k=None, top_p=None, generator=None, score_temperature=1.0, room=None,
              replacement=True):
    """Draft a tree of at most gamma nodes, one draft call per depth -> (tree, draft calls).

    expand(context, fed, nodes) returns the draft's logits after nodes a..b-1 of `fed`, the tree of
    the nodes expanded so far (after the context if nodes is None): only expanded nodes are fed
    to the draft, whose cache has `room` free entries (None: enough).
    branching[d]: children of each expanded node at depth d: the draft's top-k at temperature 0,
    iid draws from q otherwise. width: expand only the `width` nodes of each depth with the
    highest path probability (dynamic, EAGLE-2); None expands them all (static). At temperature
    0 the gamma most probable nodes are kept; sampled children cannot be pruned, so sampling stops
    at gamma nodes. replacement=False: a node's children are drawn without replacement (distinct;
    verify.multi_draft_accept then uses RSD's rule). A node's path probability is the product of
    softmax(draft logits / score_temperature) along its path: below 1 it sharpens an
    underconfident draft (temperature scaling, Guo et al. 2017).
    Example: ModelDrafter(load_model("draft"), branching=(2, 2)).draft(encode("def "), 6)
    """
    tree, fed = Tree(replacement=replacement), Tree()  # fed: what the draft holds
    at, level, calls = {-1: -1}, [-1], 0
    for d, k in enumerate(branching):
        if len(tree.tokens) >= gamma and (temperature > 0 or d == 0):
            break  # sampled: full (no draw can be pruned); gamma 0: nothing to draft
        level = sorted(level, key=lambda i: -tree.score(i))[:width]  # the nodes to expand
        if d and room is not None and len(fed.tokens) + len(level) > room:
            break  # the draft's cache is full
        for i in level if d else []:
            at[i] = fed.add(at[tree.parents[i]], tree.tokens[i])
        nodes = (len(fed.tokens) - len(level), len(fed.tokens)) if d else None
        logits = expand(context, fed, nodes)[-len(level):]  # (len(level), V)
        calls += 1
        conf = torch.softmax(logits.float() / score_temperature, -1).cpu()  # also at T = 0
        nxt = []
        for node, lg, c in zip(level, logits, conf):  # n: this node's children (k: at most)
            n = k if temperature == 0 else min(k, gamma - len(tree.tokens))  # sampled: <= gamma
            if n < 1:
                break
            q = probs(lg, temperature, top_k, top_p).cpu()
            if temperature == 0:
                draws = lg.topk(min(n, len(lg))).indices.tolist()  # raw: c may underflow to ties
            else:  # without replacement: at most the tokens q can still give
                n = n if replacement else min(n, int((q > 0).sum()))
                draws = torch.multinomial(q, n, replacement, generator=generator).tolist()
            tree.cands[node] = draws
            tree.q[node] = q
            nxt += [tree.add(node, t, tree.score(node) * float(c[t])) for t in draws]
        level = list(dict.fromkeys(nxt))
        best = sorted(tree.scores, reverse=True)[gamma - 1] if len(tree.tokens) >= gamma else 0
        if not level or max(map(tree.score, level)) < best:
            break  # no deeper node can be among the gamma most probable (children score lower)
    if len(tree.tokens) > gamma:  # keep the most probable: a subtree, as scores fall with depth
        best = sorted(range(len(tree.tokens)), key=lambda i: (-tree.score(i), i))
        tree = tree.select(best[:gamma])
    return tree, calls
