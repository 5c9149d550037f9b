"""Layer skipping (survey section 2.1.2, dependent drafters: S3D, Zhong et al. 2024; SWIFT, Xia et
al. 2024): the target drafts with some of its intermediate blocks skipped.

Early exit (early_exit.py) drops the last blocks; here any set S of blocks is skipped, and the
draft still ends in the shipped final norm and head:
    h_{l+1} = h_l if l in S else Block_l(h_l),    q_S = softmax(head(ln_f(h_N))).
Early exit at k is the set S = {k, ..., N-1}. As SWIFT does (no training), S is chosen on the
prompt itself: the full model's top-1 on the context's own tokens is computed once, and a set scores
    a(S) = the share of the context's positions where argmax q_S = argmax p,
what a greedy draft would keep there. A greedy search (the first and last blocks kept) grows S one
middle block at a time, adding the block that keeps a(S) highest: one set per size. Of these the
objective picks the highest expected speedup (Leviathan et al. 2023, section 3), a(S) taken as
the acceptance rate and the blocks run as the cost of a draft step:
    speedup = (1 - a^(gamma+1)) / ((1 - a) (gamma c + 1)),    c = (N - |S|) / N,
or, given min_agreement, the largest set with a(S) >= min_agreement.

One KV cache, as in early exit: before s = min(S) the draft computes exactly what the full model
does, so those blocks' entries and h_s are kept for verification, which runs blocks s..N-1 from
h_s. The draft's own entries in the blocks it runs after s (from an h that skipped blocks) are
overwritten by that call, which also fills the skipped blocks' entries: after every round each
block holds the full model's keys and values for every position kept.
"""
import torch

from ..drafters import pick, unsure
from ..sampling import real, whole
from ..tree import Tree
from .args import check_model, draft_args
from .early_exit import EarlyExitDrafter, check_threshold


def speedup(a, gamma, skipped, n_layer):
    """The expected walltime speedup (Leviathan et al. 2023, section 3; minispec.kit.theory's,
    kept here since the kit imports the loop) at acceptance a, c = (n_layer - skipped) / n_layer."""
    tokens = gamma + 1.0 if a >= 1 else (1 - a ** (gamma + 1)) / (1 - a)
    return tokens / (gamma * (n_layer - skipped) / n_layer + 1)


def check_skip(skip, n_layer):
    """Block indices (any collection of integers) -> a sorted tuple, or a ValueError naming the
    problem. () skips nothing: the draft is the target itself."""
    one = getattr(skip, "ndim", 1) == 0  # torch.tensor(2): iterating it is a TypeError
    if one or isinstance(skip, (str, bytes)) or not hasattr(skip, "__iter__"):
        raise ValueError(f"skip must be a collection of block indices in 0..{n_layer - 1}, "
                         f"got {skip!r}")
    blocks = sorted({whole(j, "a skipped block", 0) for j in skip})
    if blocks and blocks[-1] >= n_layer:
        raise ValueError(f"skipped block {blocks[-1]} is out of range: the blocks are "
                         f"0..{n_layer - 1}")
    if len(blocks) == n_layer:
        raise ValueError(f"skip leaves no block to draft with: skip at most {n_layer - 1} of the "
                         f"{n_layer} blocks")
    return tuple(blocks)


def check_search(n_layer, max_skip=None, min_agreement=None):
    """The search's options -> max_skip as an int (default: half the middle blocks), or a
    ValueError."""
    if n_layer < 3:
        raise ValueError(f"the search skips middle blocks and a {n_layer}-block model has none: "
                         "give skip explicitly")
    if max_skip is None:
        max_skip = max(1, (n_layer - 2) // 2)
    if whole(max_skip, "max_skip") > n_layer - 2:
        raise ValueError(f"max_skip must be in 1..{n_layer - 2} (the middle blocks), got "
                         f"{max_skip}")
    if min_agreement is not None and not 0 <= real(min_agreement, "min_agreement") <= 1:
        raise ValueError(f"min_agreement must be in [0, 1] or None, got {min_agreement}")
    return int(max_skip)


@torch.inference_mode()
def block_inputs(model, ids):
    """The full model on ids (no cache) -> [h_0, ..., h_N], each (1, T, C): h_l enters block l."""
    ids = draft_args(ids, 0)[0]  # a list of token ids (a tensor, numpy); None, 1.5, text: named
    if not ids:
        raise ValueError("ids must hold at least one token: agreement is scored on a context")
    dev = model.wte.weight.device
    hs = [model.embed(torch.tensor([list(ids)], device=dev), torch.arange(len(ids), device=dev))]
    for layer in range(model.config.n_layer):
        hs.append(model.blocks(hs[-1], layers=[layer]))
    return hs


def _agree(model, hs, skip):
    """a(S) from the full model's block inputs hs: S's pass starts from h_{min S}, the same."""
    N = model.config.n_layer
    s = skip[0] if skip else N
    h = model.blocks(hs[s], layers=[j for j in range(s, N) if j not in skip])  # (1, T, C)
    full = model.lm_head(model.ln_f(hs[N])).argmax(-1)  # (1, T)
    return float((model.lm_head(model.ln_f(h)).argmax(-1) == full).double().mean())


@torch.inference_mode()
def agreement(model, ids, skips):
    """a(S) for each skip set S in skips, on the context ids (the full model runs once).
    Example: agreement(target, ids, [(2, 3), range(4, 6)]) -> [a({2, 3}), a(exit at 4)]"""
    hs = block_inputs(model, ids)
    return [_agree(model, hs, check_skip(skip, model.config.n_layer)) for skip in skips]


@torch.inference_mode()
def search_skip(model, ids, gamma=4, max_skip=None, min_agreement=None):
    """SWIFT-style, on the context ids -> (the chosen set, {every set tried: its a(S)}).
    Greedy over middle blocks 1..N-2: S grows from {} by the block whose S has the highest a(S)
    (the lowest block on a tie), up to max_skip blocks; of the sets on that path the highest
    speedup(a(S), gamma, (N - |S|) / N) wins, or given min_agreement the largest set reaching it
    (if none does, the first)."""
    N = model.config.n_layer
    gamma = whole(gamma, "gamma (the tokens a round drafts)")  # None, -3: a ValueError
    max_skip = check_search(N, max_skip, min_agreement)
    hs = block_inputs(model, ids)
    tried, path, skip = {}, [], ()
    for _ in range(max_skip):
        grown = [tuple(sorted(skip + (j,))) for j in range(1, N - 1) if j not in skip]
        for s in grown:
            tried[s] = _agree(model, hs, s)
        skip = max(grown, key=tried.get)  # max keeps the first of equals: the lowest block
        path.append(skip)
    if min_agreement is not None:
        return ([s for s in path if tried[s] >= min_agreement] or path[:1])[-1], tried
    return max(path, key=lambda s: speedup(tried[s], gamma, len(s), N)), tried


class LayerSkipDrafter(EarlyExitDrafter):
    """Draft with the target's blocks outside `skip`, then its ln_f and head, on the loop's one
    cache. skip: block indices, or None to search a set on each prompt at its first draft
    (search_skip, with max_skip and min_agreement; the loop's gamma is the objective's).
    threshold: end a round after the first draft whose max softmax is below it (the confidence
    stop of Draft & Verify, Zhang et al. 2024, who skip layers too).
    The shared-cache bookkeeping (`_shallow`, `score`, `accept`) is early exit's with s = min(S)
    in place of k: early exit is layer skipping with S = {k..N-1}.
    Example: speculative_generate(target, LayerSkipDrafter(target, skip=[2, 3]), ids, 16)
    """

    def __init__(self, model, skip=None, max_skip=None, min_agreement=None, threshold=None):
        N = check_model(model).config.n_layer
        if skip is not None and (max_skip is not None or min_agreement is not None):
            raise ValueError("max_skip and min_agreement steer the search: give them without skip")
        self.given = None if skip is None else check_skip(skip, N)
        if skip is None:
            check_search(N, max_skip, min_agreement)  # fail now, not at the first draft
        check_threshold(threshold)
        self.model = model
        self.max_skip = max_skip
        self.min_agreement = min_agreement
        self.threshold = threshold
        self.vocab_size = model.config.vocab_size
        self.reset(model, model.new_cache())

    def reset(self, target, cache):
        if target is not self.model:
            raise ValueError("a LayerSkipDrafter drafts for the model it was built on: pass that "
                             "model as the target (a reloaded model is another: build it again)")
        super().reset(target, cache)  # blocks < s hold `shallow` entries, blocks >= s `deep`
        self.skip = self.given  # None: searched on the prompt at the first draft
        self.tried = {}  # the search's sets and their a(S)

    @property
    def first(self):
        """s = min(S): blocks before it are the full model's (N for an empty set)."""
        return self.skip[0] if self.skip else self.model.config.n_layer

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        seq, n = self.args(context, gamma, depth)
        if not n:  # nothing to draft: the search waits for a round that drafts
            return Tree.chain([], [])
        if self.skip is None:  # SWIFT: chosen on the prompt itself
            self.skip, self.tried = search_skip(self.model, seq, gamma, self.max_skip,
                                                self.min_agreement)
        later = [j for j in range(self.first, self.model.config.n_layer) if j not in self.skip]
        qs = []
        for _ in range(n):
            start = self.shallow  # the new tokens: blocks < s (kept), then the later unskipped
            h = self.model.blocks(self._shallow(seq), self.cache, later, start=start)  # (1, T, C)
            logits = self.model.lm_head(self.model.ln_f(h[0, -1]))  # (V,)
            self.calls += 1
            token, q = pick(logits, temperature, top_k, top_p, generator)
            seq.append(token)
            qs.append(q)
            if unsure(logits, self.threshold):
                break
        return Tree.chain(seq[len(seq) - len(qs):], qs)
