"""Token trees: draft several continuations at once and let the target score them all in ONE call.

A tree of N drafted tokens hangs below the root, the last token of the context. Node i holds a
token and its parent (-1 for the root); parents come before their children. To score every node
in one forward pass (SpecInfer, Miao et al. 2024; Medusa, Cai et al. 2024) the target gets
  * position ids: a node at depth d sits at position len(context) - 1 + d, whatever its branch;
  * a tree attention mask: a node attends to the whole context, its ancestors and itself only,
so the logits at node i are exactly those of the plain sequence context + (root-to-i path).

Verification walks down from the root, one node at a time:
  * greedy: follow the child equal to the target's argmax. Output = plain greedy decoding.
  * sampling: a node's children were drawn iid from the draft's q there (with replacement;
    repeats share a node but stay in the candidate list). `multi_draft_accept` (SpecInfer's
    multi-round rule) emits a token distributed exactly as p; if it is a child, descend,
    otherwise stop. By induction over depth every emitted token follows the target exactly.
Static trees expand every node with a fixed branching per depth (Medusa, Sequoia); dynamic trees
expand only the nodes the draft is most confident about, by path probability (EAGLE-2, Li et
al. 2024). After verification only the accepted path stays in the target's KV cache.
"""
import itertools
import time
from dataclasses import dataclass, field

import torch

from .decode import Result, Step, _prepare, _stop, generate
from .drafters import ModelDrafter, PromptLookupDrafter, as_drafter
from .sampling import probs, sample
from .verify import multi_draft_accept


@dataclass
class Tree:
    tokens: list = field(default_factory=list)   # (N,) the drafted token of each node
    parents: list = field(default_factory=list)  # (N,) index of the parent node, -1 for the root
    scores: list = field(default_factory=list)   # (N,) path probability under the draft
    cands: dict = field(default_factory=dict)    # node (-1: root) -> its children's draws, repeats kept
    q: dict = field(default_factory=dict)        # node -> the draft's q (V,) the draws came from
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

    def depths(self):
        d = []
        for par in self.parents:
            d.append(1 + (d[par] if par >= 0 else 0))
        return torch.tensor(d, dtype=torch.long)  # (N,)

    def path(self, node):
        """Node indices from the root's child down to `node`."""
        return self.path(self.parents[node]) + [node] if node >= 0 else []

    def select(self, keep):
        """The subtree made of the nodes in `keep` (closed under parents), renumbered."""
        new, tree = {-1: -1}, Tree()
        for i in sorted(keep):
            new[i] = tree.add(new[self.parents[i]], self.tokens[i], self.scores[i])
        tree.cands, tree.q = ({new[n]: v for n, v in d.items() if n in new} for d in (self.cands, self.q))
        return tree


def tree_mask(parents, n_ctx, n_prefix=0, nodes=None):
    """Attention mask (T, n_ctx + b) for feeding the last n_prefix context tokens, then nodes a..b-1
    (nodes=(a, b), default all) when the cache holds the rest of the context and nodes 0..a-1.
    Node i sees the context, its ancestors and itself. Example: tree_mask([-1, -1, 0], n_ctx=2)
    """
    a, b = nodes or (0, len(parents))
    anc = torch.eye(len(parents), dtype=torch.bool)  # anc[i, j]: j is i or an ancestor of i
    for i, par in enumerate(parents):
        anc[i] |= anc[par] if par >= 0 else False
    top = torch.ones(n_prefix, n_ctx + b, dtype=torch.bool).tril(n_ctx - n_prefix)  # causal context rows
    bottom = torch.cat([torch.ones(b - a, n_ctx, dtype=torch.bool), anc[a:b, :b]], 1)
    return torch.cat([top, bottom])  # (n_prefix + b - a, n_ctx + b)


def score_tree(model, cache, context, tree, nodes=None):
    """One forward over the uncached context and nodes a..b-1 (default all) -> logits at the root
    and at each node fed: (1 + b - a, V), or (b - a, V) if the cache already held the context."""
    prefix, (a, b), n = context[cache.length:], nodes or (0, len(tree.tokens)), len(context)
    pos = torch.cat([torch.arange(n - len(prefix), n), n - 1 + tree.depths()[a:b]])  # depth d: position n - 1 + d
    x = torch.tensor([prefix + tree.tokens[a:b]])
    logits = model(x, cache, pos=pos, mask=tree_mask(tree.parents, n, len(prefix), (a, b)))[0]  # (T, V)
    return logits[max(0, len(prefix) - 1):]


@torch.inference_mode()
def grow_tree(drafter, context, branching=(4, 2, 2, 1), width=None, temperature=0.0, top_k=None,
              top_p=None, generator=None, max_nodes=10_000, budget=None, score_temperature=1.0):
    """Draft a tree with a ModelDrafter, one draft call per depth.

    branching[d]: children of each expanded node at depth d: the draft's top-k at temperature 0,
    iid draws from q otherwise. width: expand only the `width` nodes of each depth with the
    highest path probability (dynamic, EAGLE-2); None expands them all (static). Only expanded
    nodes are fed to the draft. budget (temperature 0 only): keep the `budget` most probable
    nodes, and stop growing once no deeper node could be among them. A node's path probability
    is the product of softmax(draft logits / score_temperature) along its path: below 1 it
    sharpens an underconfident draft (temperature scaling; fit it with `fit_score_temperature`).
    Example: grow_tree(ModelDrafter(load_model("draft")), encode("def "), (2, 2)).tokens
    """
    if drafter.cache is None:
        drafter.reset()
    tree, fed, at = Tree(), Tree(), {-1: -1}  # fed: the expanded nodes, as the draft's cache holds them
    keep = min(budget or max_nodes, max_nodes) if temperature == 0 else max_nodes
    room, level = drafter.cache.k.shape[3] - len(context), [-1]  # free entries in the draft's cache
    score = lambda i: tree.scores[i] if i >= 0 else 1.0
    for d, k in enumerate(branching):
        level = sorted(level, key=lambda i: -score(i))[:width]  # the nodes to expand
        if d and len(fed.tokens) + len(level) > room:
            break  # the draft's cache is full
        for i in level if d else []:
            at[i] = fed.add(at[tree.parents[i]], tree.tokens[i])
        nodes = (len(fed.tokens) - len(level), len(fed.tokens)) if d else None
        logits = score_tree(drafter.model, drafter.cache, context, fed, nodes)[-len(level):]  # (len(level), V)
        drafter.calls += 1
        conf = torch.softmax(logits.float() / score_temperature, -1)  # the draft's confidence, also at T = 0
        nxt = []
        for node, lg, c in zip(level, logits, conf):
            if temperature > 0 and len(tree.tokens) + k > max_nodes:
                break  # sampled children cannot be pruned later: stop at max_nodes
            q = probs(lg, temperature, top_k, top_p)
            draws = (c.topk(k).indices.tolist() if temperature == 0 else
                     torch.multinomial(q, k, replacement=True, generator=generator).tolist())
            tree.cands[node], tree.q[node] = draws, q
            nxt += [tree.add(node, t, score(node) * float(c[t])) for t in draws]
        level = list(dict.fromkeys(nxt))
        if not level or (len(tree.tokens) >= keep and
                         max(map(score, level)) < sorted(tree.scores, reverse=True)[keep - 1]):
            break  # (the second test: children are never more probable than their parent)
    if len(tree.tokens) > keep:  # keep the most probable nodes: a subtree, as scores fall with depth
        tree = tree.select(sorted(range(len(tree.tokens)), key=lambda i: (-tree.scores[i], i))[:keep])
    return tree


@torch.inference_mode()
def greedy_draft_logits(target, draft, prompts, max_new_tokens=100):
    """Along the target's greedy continuation of each prompt: the draft's logits before each token
    (n, V) and the tokens (n,), i.e. what a tree must contain at temperature 0. draft: a GPT."""
    logits, tokens = [], []
    for ids in prompts:
        seq = ids + generate(target, ids, max_new_tokens).tokens
        logits.append(draft(torch.tensor([seq]))[0, len(ids) - 1:-1].float())
        tokens.append(torch.tensor(seq[len(ids):]))
    return torch.cat(logits), torch.cat(tokens)


def fit_score_temperature(logits, tokens, grid=(0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.25, 1.5, 2)):
    """Temperature scaling (Guo et al. 2017): the t in `grid` with the lowest cross-entropy of
    `tokens` under softmax(logits / t). One number that makes a draft's confidences honest.
    Example: fit_score_temperature(*greedy_draft_logits(target, draft, prompts))"""
    return min(grid, key=lambda t: float(torch.nn.functional.cross_entropy(logits / t, tokens)))


def verify_tree(tree, p, temperature=0.0, rule=multi_draft_accept, generator=None):
    """p (N + 1, V): the target at the root (row 0) and after each node -> (accepted path, token added).

    Greedy: descend while the target's argmax is a child. Sampling: at each node the rule (by
    default SpecInfer's multi-round rejection) picks a token ~ p from the candidates drawn from q.
    """
    path, node = [], -1
    while True:
        kids = tree.children(node)
        if temperature == 0:
            tok = int(p[node + 1].argmax())
        else:
            tok = rule(tree.cands[node], tree.q[node], p[node + 1], generator) if kids else sample(p[node + 1], generator)
        if tok not in kids:
            return path, tok
        node = kids[tok]
        path.append(node)


def per_branch_accept(candidates, q, p, generator=None):
    """LOSSY: sample the target separately for each branch and keep the first that matches."""
    ys = [sample(p, generator) for _ in candidates]
    return next((x for x, y in zip(candidates, ys) if x == y), ys[0] if ys else sample(p, generator))


def typical_accept(candidates, q, p, generator=None, eps=0.3, delta=0.09):
    """LOSSY: Medusa's typical acceptance, keep a candidate with p(x) > min(eps, delta * exp(-H(p)))."""
    entropy = -(p * p.clamp(min=1e-30).log()).sum()
    ok = [x for x in candidates if p[x] > min(eps, delta * float(torch.exp(-entropy)))]
    return ok[0] if ok else sample(p, generator)


def rule_tv(rule, p, q, k, n=20_000, seed=0):
    """Total variation between p and what `rule` emits at one node with k candidates drawn iid from q
    (Monte Carlo, n trials). Lossless rules give sampling noise only. Example: rule_tv(multi_draft_accept, p, q, 2)"""
    g, counts = torch.Generator().manual_seed(seed), torch.zeros_like(p)
    for _ in range(n):
        counts[rule(torch.multinomial(q, k, replacement=True, generator=g).tolist(), q, p, g)] += 1
    return 0.5 * float((counts / n - p).abs().sum())


def keep_path(cache, start, nodes):
    """Move the cache entries of the accepted nodes (at start + node) to start, start + 1, ...; crop."""
    idx = start + torch.tensor(nodes, dtype=torch.long)
    cache.k[:, :, :, start:start + len(nodes)] = cache.k[:, :, :, idx]  # (n_layer, B, H, n, hs)
    cache.v[:, :, :, start:start + len(nodes)] = cache.v[:, :, :, idx]
    cache.crop(start + len(nodes))


def draft_any(draft, context, branching, temperature, top_k, top_p, g, max_nodes, lookup, **grow):
    """A tree from any drafter: a model grows one; prompt lookup grafts every match at temperature 0;
    other drafters give a chain. `lookup` adds prompt-lookup branches to a model tree (greedy only)."""
    if isinstance(draft, ModelDrafter):
        tree = grow_tree(draft, context, branching, temperature=temperature, top_k=top_k, top_p=top_p,
                         generator=g, max_nodes=max_nodes, **grow)  # grow: width, budget, score_temperature
    elif temperature == 0 and isinstance(draft, PromptLookupDrafter):
        tree, lookup = Tree(), draft
    else:  # any drafter: a chain, each token with the q it was drawn from
        tree, (tokens, q) = Tree(), draft.propose(context, len(branching), temperature, top_k, top_p, g)
        for d, t in enumerate(tokens[:min(len(branching), max_nodes)]):
            tree.cands[d - 1], tree.q[d - 1] = [t], q[d]
            tree.add(d - 1, t)
    for follow in (lookup.matches(context, len(branching)) if lookup else []):
        node = -1
        for t in follow[:max_nodes - len(tree.tokens)]:
            node = tree.add(node, t, 0.0)
    return tree


def draw_tree(tree, path=(), ax=None, label=None):
    """The tree left to right, the accepted path in green. label: token id -> text (default: bytes)."""
    import matplotlib.pyplot as plt
    from .model import decode
    label = label or (lambda t: repr(decode([t]))[1:-1])
    ax = ax or plt.subplots(figsize=(7, 4))[1]
    d, y, rows = {-1: 0, **dict(enumerate(tree.depths().tolist()))}, {}, itertools.count()

    def place(i):  # a leaf takes the next row, a parent the mean of its children's rows
        kids = list(tree.children(i).values())
        y[i] = sum(map(place, kids)) / len(kids) if kids else -next(rows)
        return y[i]
    place(-1)
    for i, (t, par) in enumerate(zip(tree.tokens, tree.parents)):
        color = "#2e7d32" if i in path else "#9e9e9e"
        ax.plot([d[par], d[i]], [y[par], y[i]], color=color, lw=2 if i in path else 1, zorder=0)
        ax.text(d[i], y[i], label(t), ha="center", va="center", family="monospace",
                bbox=dict(boxstyle="round", fc="#c8e6c9" if i in path else "white", ec=color))
    ax.text(0, y[-1], "root", ha="center", va="center", bbox=dict(boxstyle="round", fc="#eeeeee"))
    ax.set(xlabel="depth", xticks=range(max(d.values()) + 1), yticks=[], frame_on=False)
    return ax


@dataclass
class TreeStep(Step):
    tree: Tree = None   # the drafted tree of this round
    path: list = field(default_factory=list)  # accepted node indices


@torch.inference_mode()
def tree_generate(target, draft, ids, max_new_tokens=64, branching=(4, 2, 2, 1), width=None, budget=None,
                  temperature=0.0, top_k=None, top_p=None, seed=0, eos_token=None, crop_prompt=False,
                  rule=multi_draft_accept, lookup=None, score_temperature=1.0):
    """Speculative decoding with token trees: draft a tree, score it in one target call, keep a path.

    draft: a GPT / ModelDrafter (grows a static or dynamic tree), a PromptLookupDrafter, or any
    Drafter (a chain). width, budget, score_temperature: see grow_tree (dynamic trees).
    lookup: a PromptLookupDrafter whose matches are added as extra branches (temperature 0 only).
    Example: tree_generate(load_model("target"), load_model("draft"), encode("def "), 32).tokens
    """
    draft = as_drafter(draft, target)
    if not branching or any(int(k) != k or k < 1 for k in branching):
        raise ValueError(f"branching must be a non-empty tuple of integers >= 1, got {branching}")
    if lookup is not None and temperature > 0:
        raise ValueError("lookup branches are deterministic: they can only be added at temperature 0")
    if not score_temperature > 0 or any(x is not None and x < 1 for x in (width, budget)):
        raise ValueError(f"width and budget must be >= 1 (or None) and score_temperature > 0, got width={width}, "
                         f"budget={budget}, score_temperature={score_temperature}")
    ids = _prepare(target, ids, max_new_tokens, temperature, top_k, top_p, crop_prompt)
    g = torch.Generator().manual_seed(seed)
    draft.reset()
    calls0 = getattr(draft, "calls", 0)
    cache, context, steps, t0 = target.new_cache(), list(ids), [], time.perf_counter()
    while len(context) - len(ids) < max_new_tokens and (eos_token is None or eos_token not in context[len(ids):]):
        depth = min(len(branching), max_new_tokens - (len(context) - len(ids)) - 1)
        room = target.config.block_size - len(context)
        tree = (draft_any(draft, context, branching[:depth], temperature, top_k, top_p, g, room, lookup,
                          width=width, budget=budget, score_temperature=score_temperature) if depth > 0 else Tree())
        p = probs(score_tree(target, cache, context, tree), temperature, top_k, top_p)  # (N + 1, V)
        path, tok = verify_tree(tree, p, temperature, rule, g)
        keep_path(cache, len(context), path)
        draft.rollback(len(context))  # the draft re-reads the accepted path next round
        kept = [tree.tokens[i] for i in path]
        ratios = [float(p[0 if i == 0 else path[i - 1] + 1, t]) for i, t in enumerate(kept)]
        node = path[-1] if path else -1  # for the trace: continue with the draft's first choice
        rest = []
        while tree.children(node):
            node = max(tree.children(node).values(), key=lambda i: tree.scores[i])
            rest.append(tree.tokens[node])
        context += kept + [tok]
        steps.append(TreeStep(kept + rest, len(kept), tok, ratios, tree, path))
    wall = time.perf_counter() - t0
    tokens = _stop(context[len(ids):], max_new_tokens, eos_token)
    drafted = sum(len(s.tree.tokens) for s in steps)
    stats = dict(acceptance_rate=sum(s.accepted for s in steps) / drafted if drafted else 0.0,
                 tokens_per_call=len(tokens) / len(steps), target_calls=len(steps),
                 draft_calls=getattr(draft, "calls", 0) - calls0, drafted=drafted, wall_time=wall,
                 tokens_per_second=len(tokens) / wall)
    return Result(tokens, steps, stats)
