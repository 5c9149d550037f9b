"""Verification rules: which drafted tokens does the target keep, and what does it add?

Notation (fixed for the whole project): the target's distribution is p, the draft's is q, the
draft proposes gamma tokens x_1..x_gamma, and alpha is the chance that a drafted token is kept.
(Chen et al. 2023 use the opposite letters, q for the target and p for the draft.)
A rule decides one tree node: rule(candidates, q, p, generator=None, replacement=True) -> token,
for candidates drawn from the draft's q (V,) (iid; distinct if replacement=False, which verify_tree
passes only then) or guessed (q None); p (V,) is the target's. All are lossless (Medusa's lossy
typical_accept is minispec.methods.typical).
"""
import torch

from .sampling import check_sampling_args, sample, whole


def accept_prob(p, q):
    """min(1, p / q), elementwise: the chance that a token drawn from q is kept (1 where q = 0).

    Example: accept_prob(torch.tensor([.5, .1]), torch.tensor([.25, .4])) -> tensor([1.0, 0.25])
    """
    return torch.where(q > 0, p / q, 1.0).clamp(max=1)


def residual(p, q):
    """norm(max(0, p - q)): what is left of p after q's accepted mass (falls back to p if none)."""
    r = torch.clamp(p - q, min=0)
    total = r.sum(-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp(min=1e-30), p)


def _law(x, name):  # rows of probabilities, else a ValueError (logits kept every draft; nan: no)
    if not (torch.is_tensor(x) and (x >= 0).all() and ((x.sum(-1) - 1).abs() < 1e-2).all()):
        raise ValueError(f"{name} must be distributions (>= 0, summing to 1): ms.probs(logits)")
    return x


def _check(draft_tokens, p, q=None):  # the shapes, or a ValueError; -> the drafts as ints
    g = len(draft_tokens)
    if p.dim() != 2 or p.shape[0] != g + 1:
        raise ValueError(f"p must have shape (1 + N, V) = ({g + 1}, V), got {tuple(p.shape)}")
    if q is not None and tuple(q.shape) != (g, p.shape[1]):
        raise ValueError(f"q must have shape (gamma, V) = ({g}, {p.shape[1]}), not {q.shape}")
    return [whole(t, "each draft token", 0, p.shape[1]) for t in draft_tokens]  # 1.7, None: no


def greedy_accept(draft_tokens, p):
    """draft_tokens (g,), p (g+1, V) -> (n accepted, token the target adds): keep the longest
    prefix on which the draft agrees with the target's argmax, then add the target's own; the
    output is the target's greedy text exactly.

    Example: greedy_accept([2, 0], torch.eye(3)[[2, 1, 0]]) == (1, 1)
    """
    draft_tokens = _check(draft_tokens, p)
    best = p.argmax(-1).tolist()  # the target's greedy choice after each prefix
    n = 0
    while n < len(draft_tokens) and draft_tokens[n] == best[n]:
        n += 1
    return n, best[n]


def speculative_accept(draft_tokens, q, p, generator=None):
    """draft_tokens (g,) drawn from q (g, V); target p (g+1, V) -> (n accepted, token added).

    Leviathan et al. 2023, Alg. 1; Chen et al. 2023, Alg. 2. Each emitted token is distributed
    exactly as p: P(keep, x) + P(reject) * residual(x) = min(p, q)(x) + (p - min(p, q))(x) = p(x).
    """
    draft_tokens = _check(draft_tokens, _law(p, "p"), _law(q, "q"))
    for i, x in enumerate(draft_tokens):
        # Step 1: keep x with probability min(1, p/q): p == q keeps always (r < 1), p == 0 never.
        if torch.rand((), generator=generator) < accept_prob(p[i, x], q[i, x]):
            continue
        # Step 2: rejected -> draw the correction from the residual distribution.
        return i, sample(residual(p[i], q[i]), generator)
    # Step 3: every draft kept -> the target's distribution after them gives a bonus token.
    return len(draft_tokens), sample(p[-1], generator)


def multi_draft_accept(candidates, q, p, generator=None, replacement=True):
    """k candidates drawn from q (V,) at one node; target p (V,) -> the emitted token (~ p).

    SpecInfer (Miao et al. 2024), iid candidates: try each with min(1, p/q); after a rejection p
    becomes norm(max(0, p - q)), the distribution of what the target still owes; if every
    candidate fails, sample from that. Drawn without replacement (replacement=False), candidate
    i + 1 came from q without the first i, renormalized: q becomes that too, so each try is the
    one-draft rule for the pair it really is (recursive rejection sampling, RSD, Jeon et al. 2024).
    """
    if _law(p, "p").dim() != 1 or (q is not None and _law(q, "q").shape != p.shape):
        raise ValueError(f"p and q must both have shape (V,), got {tuple(p.shape)} and "
                         f"{None if q is None else tuple(q.shape)}")
    candidates = [whole(c, "each candidate", 0, len(p)) for c in candidates]  # 1.7, None: no
    if not isinstance(replacement, bool):  # the string "False" would read as True: another law
        raise ValueError(f"replacement must be True or False, got {replacement!r}")
    if not replacement and len(set(candidates)) < len(candidates):
        raise ValueError(f"candidates drawn without replacement are distinct, got {candidates}")
    if q is None:  # deterministic guesses: draw x ~ p (the walk keeps a guess equal to it)
        return sample(p, generator)
    for x in candidates:
        if torch.rand((), generator=generator) < accept_prob(p[x], q[x]):
            return x
        p = residual(p, q)
        if not replacement:  # the next candidate was drawn from q without x: renormalized by the
            q = q.index_fill(0, torch.tensor([x]), 0.0)  # mass left (in float32, 1 - q[x] is not)
            q = q / q.sum()
    return sample(p, generator)


def verify_tree(tree, p, temperature=0.0, generator=None, rule=multi_draft_accept):
    """Walk any drafter's tree (a chain is one branch) with the target's p (1 + N, V): row 0 after
    the context (the root), row 1 + i after node i -> (path: the kept nodes, root's child first;
    token: the target's own next).

    Temperature 0: descend while the target's argmax is a child (greedy_accept, on a chain).
    Otherwise, at each node with children: `rule` turns its candidates into one token ~ p
    (speculative_accept's step, on a chain; x ~ p where the children are deterministic guesses,
    no q recorded: heads, lookahead, Tree.add); descend if it is a child, else stop. After a
    leaf, x ~ p (the bonus token). Every emitted token follows p, so by induction over depth the
    output does too.
    """
    check_sampling_args(temperature)  # None or -1 would sample
    if not callable(rule):  # checked at every temperature: at T > 0 it failed mid-walk
        raise ValueError(f"rule must be a function like multi_draft_accept, got {rule!r}")
    p = torch.as_tensor(p)  # a list of rows too
    _check(tree.tokens, p)  # (1 + N, V) for N nodes, each a token id below V
    path, node = [], -1
    while True:
        kids, pn, q = tree.children(node), p[node + 1], tree.q.get(node)
        if temperature == 0:
            tok = int(pn.argmax())
        elif kids:
            kw = {} if tree.replacement else {"replacement": False}  # how the kids were drawn
            tok = rule(tree.cands.get(node, list(kids)), q, pn, generator, **kw)
        else:  # a leaf: the bonus token
            tok = sample(pn, generator)
        if tok not in kids:
            return path, tok
        node = kids[tok]
        path.append(node)

