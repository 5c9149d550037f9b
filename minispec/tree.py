"""Token trees: every draft is a tree (a chain is the tree with one branch), scored in ONE target call.

N drafted tokens hang below the root, the last token of the context; node i holds a token and its
parent (-1: the root), parents before children. To score every node in one forward pass (SpecInfer,
Miao et al. 2024; Medusa, Cai et al. 2024) the target gets
  * position ids: a node at depth d sits at position len(context) - 1 + d, whatever its branch;
  * a tree attention mask: a node attends to the whole context, its ancestors and itself only,
so the logits at node i are exactly those of the plain sequence context + (root-to-i path).
Static trees expand every node with a fixed branching per depth (Medusa, Sequoia); dynamic trees
expand only the nodes the draft is most confident about (EAGLE-2, Li et al. 2024): `grow_tree`.
"""
from dataclasses import dataclass, field

import torch

from .batch import feed
from .sampling import probs


@dataclass
class Tree:
    tokens: list = field(default_factory=list)   # (N,) the drafted token of each node
    parents: list = field(default_factory=list)  # (N,) index of the parent node, -1 for the root
    scores: list = field(default_factory=list)   # (N,) path probability under the draft
    cands: dict = field(default_factory=dict)    # node (-1: root) -> its children's draws, repeats kept
    q: dict = field(default_factory=dict)        # node -> the q (V,) the draws came from; None: deterministic
    kids: dict = field(default_factory=dict)     # node -> {token: child index}

    def children(self, node):
        """{token: child index} of a node (-1 for the root)."""
        return self.kids.setdefault(node, {})

    def add(self, parent, token, score=1.0):
        """Append a child (or return the existing one with that token): its index."""
        if token not in self.children(parent):
            self.children(parent)[token] = len(self.tokens)
            self.tokens.append(token), self.parents.append(parent), self.scores.append(score)
        return self.children(parent)[token]

    @classmethod
    def chain(cls, tokens, q=None):
        """A chain: token d drawn from q[d] (V,), or deterministic guesses (q None)."""
        tree = cls()
        for d, t in enumerate(tokens):
            tree.cands[d - 1], tree.q[d - 1] = [t], None if q is None else q[d]
            tree.add(d - 1, t)
        return tree

    @classmethod
    def from_paths(cls, paths, size=None):
        """The prefix tree of deterministic token paths (at most `size` nodes)."""
        tree = cls()
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
        new, tree = {-1: -1}, Tree()
        for i in sorted(keep):
            new[i] = tree.add(new[self.parents[i]], self.tokens[i], self.scores[i])
        tree.cands, tree.q = ({new[n]: v for n, v in d.items() if n in new} for d in (self.cands, self.q))
        return tree


def tree_mask(parents, n_ctx, n_prefix=0, nodes=None):
    """Attention mask (T, n_ctx + b): node i sees the context, its ancestors and itself. Rows: the last
    n_prefix context tokens (causal), then nodes a..b-1 (nodes=(a, b), default all), fed when the cache
    holds the rest of the context and nodes 0..a-1. Example: tree_mask([-1, -1, 0], n_ctx=2)
    """
    a, b = nodes or (0, len(parents))
    anc = torch.eye(len(parents), dtype=torch.bool)  # anc[i, j]: j is i or an ancestor of i
    for i, par in enumerate(parents):
        anc[i] |= anc[par] if par >= 0 else False
    top = torch.ones(n_prefix, n_ctx + b, dtype=torch.bool).tril(n_ctx - n_prefix)  # causal context rows
    bottom = torch.cat([torch.ones(b - a, n_ctx, dtype=torch.bool), anc[a:b, :b]], 1)
    return torch.cat([top, bottom])  # (n_prefix + b - a, n_ctx + b)


def score_trees(model, cache, contexts, trees, nodes=None):
    """One forward over each row's uncached context, then its tree's nodes a..b-1 (default all) -> per row,
    ln_f(h_N) (T_b, C) and the logits (T_b, V) of every token fed (the last 1 + b - a rows: the root, if it
    was fed, and the nodes). Rows of different lengths share the pass (batch.feed)."""
    seqs, pos, masks = [], [], []
    chains = all(t.parents == list(range(-1, len(t.parents) - 1)) for t in trees)  # need no tree mask: causal
    for L, context, tree in zip(cache.lengths, contexts, trees):
        prefix, (a, b), n = context[L:], nodes or (0, len(tree.tokens)), len(context)
        seqs.append(prefix + tree.tokens[a:b])
        if not chains:
            pos.append(torch.cat([torch.arange(n - len(prefix), n), n - 1 + tree.depths()[a:b]]))  # depth d: n - 1 + d
            masks.append(tree_mask(tree.parents, n, len(prefix), (a, b)))
    h, logits = feed(model, cache, seqs, pos or None, masks or None)  # None: feed's consecutive positions, causal
    return [h[b, :len(s)] for b, s in enumerate(seqs)], [logits[b, :len(s)] for b, s in enumerate(seqs)]


def score_tree(model, cache, context, tree, nodes=None):
    """score_trees for one row: (T, C), (T, V)."""
    (h,), (logits,) = score_trees(model, cache, [context], [tree], nodes)
    return h, logits


def check_tree_options(branching, width, score_temperature):
    """grow_tree's options as a drafter takes them (branching None: a chain): ValueError naming the bad one."""
    if branching is not None and (not branching or any(int(k) != k or k < 1 for k in branching)):
        raise ValueError(f"branching must be a non-empty tuple of integers >= 1, got {branching}")
    if (width is not None and width < 1) or not score_temperature > 0:
        raise ValueError(f"width must be >= 1 (or None) and score_temperature > 0, got {width}, {score_temperature}")


@torch.inference_mode()
def grow_tree(drafter, context, gamma, branching=(4, 2, 2, 1), width=None, temperature=0.0, top_k=None,
              top_p=None, generator=None, score_temperature=1.0):
    """Draft a tree of at most gamma nodes, one draft call per depth: drafter.expand(context, fed, nodes)
    returns the draft's logits after nodes a..b-1 of `fed`, the tree of the nodes expanded so far (after
    the context if nodes is None): only expanded nodes are fed to the draft.

    branching[d]: children of each expanded node at depth d: the draft's top-k at temperature 0, iid
    draws from q otherwise. width: expand only the `width` nodes of each depth with the highest path
    probability (dynamic, EAGLE-2); None expands them all (static). At temperature 0 the gamma most
    probable nodes are kept; sampled children cannot be pruned, so sampling stops at gamma nodes. A
    node's path probability is the product of softmax(draft logits / score_temperature) along its path:
    below 1 it sharpens an underconfident draft (temperature scaling, Guo et al. 2017).
    Example: grow_tree(ModelDrafter(load_model("draft")), encode("def "), 6, (2, 2)).tokens
    """
    if gamma < 1:
        return Tree()
    tree, fed, at = Tree(), Tree(), {-1: -1}  # fed: the expanded nodes, as the draft's cache holds them
    room, level = drafter.cache.k.shape[3] - len(context), [-1]  # free entries in the draft's cache
    score = lambda i: tree.scores[i] if i >= 0 else 1.0
    for d, k in enumerate(branching):
        level = sorted(level, key=lambda i: -score(i))[:width]  # the nodes to expand
        if d and len(fed.tokens) + len(level) > room:
            break  # the draft's cache is full
        for i in level if d else []:
            at[i] = fed.add(at[tree.parents[i]], tree.tokens[i])
        nodes = (len(fed.tokens) - len(level), len(fed.tokens)) if d else None
        logits = drafter.expand(context, fed, nodes)[-len(level):]  # (len(level), V)
        drafter.calls += 1
        conf = torch.softmax(logits.float() / score_temperature, -1).cpu()  # the draft's confidence, also at T = 0
        nxt = []
        for node, lg, c in zip(level, logits, conf):
            if temperature > 0:  # draw no more than gamma
                k = min(k, gamma - len(tree.tokens))
                if k < 1:
                    break
            q = probs(lg, temperature, top_k, top_p).cpu()
            draws = (c.topk(k).indices.tolist() if temperature == 0 else
                     torch.multinomial(q, k, replacement=True, generator=generator).tolist())
            tree.cands[node], tree.q[node] = draws, q
            nxt += [tree.add(node, t, score(node) * float(c[t])) for t in draws]
        level = list(dict.fromkeys(nxt))
        if not level or (len(tree.tokens) >= gamma and
                         max(map(score, level)) < sorted(tree.scores, reverse=True)[gamma - 1]):
            break  # or no deeper node can be among the gamma most probable (a child is never above its parent)
    if len(tree.tokens) > gamma:  # keep the most probable nodes: a subtree, as scores fall with depth
        tree = tree.select(sorted(range(len(tree.tokens)), key=lambda i: (-tree.scores[i], i))[:gamma])
    return tree
