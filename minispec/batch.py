"""Batches of rows of different lengths: ragged prompts, and drafts of which each row keeps its own number.

Real engines decode many requests at once. Rows then disagree about everything: prompt length, how
many drafted tokens the target kept, when they stop. One padded forward pass serves them all if
  * each row writes its keys after ITS OWN cached entries (KVCache.write, per-row lengths),
  * each token sits at its own row's position (not the longest row's: a uniform-position bug),
  * attention masks out every entry past a row's length (causal_mask: masked, not zeroed).
The speculative loop then verifies each row on its own and rolls each row back to its own length.
transformers' assisted generation and most teaching code refuse a batch above 1 for these reasons.
"""
import torch
import torch.nn.functional as F


def causal_mask(lengths, n_new, T, masks=None):
    """Attention mask (B, T, max(lengths) + T) for rows of different lengths fed one padded batch:
    row b's n_new[b] real tokens see its lengths[b] cached entries and, among the new ones, what
    masks[b] (T_b, lengths[b] + T_b) allows (default: causal); its padding sees only itself (so no
    row of softmax is empty). Nothing sees padding or entries past a row's length (rolled-back drafts,
    storage up to the longest row). Masked, not zeroed: a zero key still scores 0, so it takes softmax
    weight e^0 and dilutes the row's attention (a "phantom" key, a classic batching bug)."""
    m = torch.zeros(len(lengths), T, max(lengths) + T, dtype=torch.bool)
    for b, (L, n) in enumerate(zip(lengths, n_new)):
        m[b, :n, :L + n] = masks[b] if masks is not None else torch.ones(n, L + n, dtype=torch.bool).tril(L)
        m[b, range(n, T), range(L + n, L + T)] = True
    return m


def feed(model, cache, seqs, pos=None, masks=None):
    """Rows of different lengths in ONE forward pass: row b's tokens seqs[b] follow its cache.lengths[b]
    entries, padded to one length T (the cache counts each row's own tokens only). pos, masks: per-row
    position ids (T_b,) and attention masks (T_b, lengths[b] + T_b), e.g. a tree's (default: consecutive,
    causal) -> ln_f(h_N) (B, T, C) and logits (B, T, V): row b's first len(seqs[b]) are its tokens'.
    Example: feed(model, model.new_cache(2), [[1, 2, 3], [4]])[1][1, 0]  (the logits after [4])"""
    if len(seqs) != len(cache.lengths):
        raise ValueError(f"{len(seqs)} rows of tokens for a cache of {len(cache.lengths)} rows")
    L, n, T, dev = cache.lengths, [len(s) for s in seqs], max(len(s) for s in seqs), model.wte.weight.device
    idx = torch.tensor([s + [0] * (T - len(s)) for s in seqs], device=dev)  # (B, T), padded with token 0
    if len(set(L)) == len(set(n)) == 1 and pos is None and masks is None:  # rows alike: plain causal attention
        pos, mask = torch.arange(L[0], L[0] + T), None
    else:
        pos = [pos[b] if pos else torch.arange(L[b], L[b] + n[b]) for b in range(len(seqs))]  # padding: position 0
        pos, mask = torch.stack([F.pad(p, (0, T - len(p))) for p in pos]), causal_mask(L, n, T, masks).to(dev)
    h = model.ln_f(model.blocks(model.embed(idx, pos.to(dev)), cache, mask=mask))
    cache.lengths = [a + b for a, b in zip(L, n)]
    return h, model.lm_head(h)
