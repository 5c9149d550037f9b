"""Batches of rows of different lengths: ragged prompts, and drafts of which each row keeps its own
number.

Real engines decode many requests at once. Rows then disagree about everything: prompt length, how
many drafted tokens the target kept, when they stop. One padded forward pass serves them all if
  * each row writes its keys after ITS OWN cached entries (RaggedCache.write, per-row lengths),
  * each token sits at its own row's position (not the longest row's: a uniform-position bug),
  * attention masks out every entry past a row's length (causal_mask: masked, not zeroed).
The speculative loop then verifies each row on its own and rolls each row back to its own length.
transformers' assisted generation and most teaching code refuse a batch above 1 for these reasons.
"""
import torch
import torch.nn.functional as F

from ..model import GPT, KVCache
from ..sampling import whole


class RaggedCache(KVCache):
    """A KVCache whose B rows each keep their own number of valid entries, lengths[b]."""

    def __init__(self, config, batch_size=1, size=None, device=None, dtype=None):
        batch_size = whole(batch_size, "batch_size (the cache's rows)", 0)
        size = None if size is None else whole(size, "size (the cache's entries)")
        self.lengths = [0] * batch_size
        super().__init__(config, batch_size, size, device, dtype)
        if hasattr(config, "n_kv_head"):  # a Llama: n_kv_head key/value heads (grouped queries)
            self.k = self.k[:, :, :config.n_kv_head].clone()  # (n_layer, B, H_kv, size, hs)
            self.v = self.v[:, :, :config.n_kv_head].clone()

    @property
    def length(self):  # the longest row's
        return max(self.lengths, default=0)  # no rows (an empty batch): 0

    @length.setter
    def length(self, n):
        self.lengths = [n] * len(self.lengths)

    def crop(self, n):
        """Row b keeps its first n[b] entries (an int: the same for every row)."""
        one = not hasattr(n, "__iter__") or getattr(n, "ndim", 1) == 0  # 2, torch.tensor(2)
        n = [n] * len(self.lengths) if one else list(n)
        n = [whole(m, "each row's length", 0) for m in n]  # 0.5, None: no; numpy's ints: yes
        if len(n) != len(self.lengths) or not all(0 <= m <= L for m, L in zip(n, self.lengths)):
            raise ValueError(f"cannot crop a cache of lengths {self.lengths} to {n}")
        self.lengths = n

    def keep(self, start, nodes):
        """KVCache.keep, for rows all of one length: rows that differ keep their own (crop)."""
        if len(set(self.lengths)) > 1:  # the room of the longest row is padding in the others
            raise ValueError(f"keep moves one path in every row, but the rows have lengths "
                             f"{self.lengths}: crop each row to its own, crop([...])")
        super().keep(start, nodes)

    def write(self, layer, k, v, start=None):
        """Row b's T new keys/values (B, H, T, hs) go after ITS OWN lengths[b] entries (feed);
        returns every row's entries up to the longest row's (B, H, S, hs). A `start` (GPT.blocks)
        is one position for every row: refused once the rows differ."""
        T, dev = k.shape[2], k.device
        if len(set(self.lengths)) == 1:  # all rows equally long: one slice
            return super().write(layer, k, v, self.lengths[0] if start is None else start)
        if start is not None:
            raise ValueError(f"the cache's rows have different lengths {self.lengths}: feed them "
                             "with minispec.batch.feed")
        cols = torch.tensor(self.lengths, device=dev)[:, None] + torch.arange(T, device=dev)
        rows = torch.arange(len(self.lengths), device=dev)[:, None]  # (B, 1) with cols (B, T)
        self.k[layer][rows, :, cols] = k.transpose(1, 2)  # row b, entry lengths[b] + t
        self.v[layer][rows, :, cols] = v.transpose(1, 2)
        S = max(self.lengths) + T
        return self.k[layer, :, :, :S], self.v[layer, :, :, :S]


def causal_mask(lengths, n_new, T):
    """Attention mask (B, T, max(lengths) + T) for rows of different lengths fed one padded batch:
    row b's n_new[b] real tokens see its lengths[b] cached entries and the new ones up to their
    own (causal); its padding sees only itself (so no row of softmax is empty). Nothing sees
    padding or entries past a row's length (rolled-back drafts, storage up to the longest row).
    Masked, not zeroed: a zero key still scores 0, so it takes softmax weight e^0 and dilutes the
    row's attention (a "phantom" key, a classic batching bug)."""
    lengths = [whole(L, "each row's cached length", 0) for L in lengths]  # a tensor's too
    n_new, T = [whole(n, "each row's new tokens", 0) for n in n_new], whole(T, "T", 0)
    if not lengths or len(lengths) != len(n_new) or max(n_new) > T:  # zip dropped rows; past T
        raise ValueError(f"one count of new tokens per row, each at most T={T}: got {len(lengths)} "
                         f"lengths and n_new={list(n_new)}")
    m = torch.zeros(len(lengths), T, max(lengths) + T, dtype=torch.bool)
    for b, (L, n) in enumerate(zip(lengths, n_new)):
        m[b, :n, :L + n] = torch.ones(n, L + n, dtype=torch.bool).tril(L)
        m[b, range(n, T), range(L + n, L + T)] = True
    return m


def feed(model, cache, seqs):
    """Rows of different lengths in ONE forward pass of a GPT or a Llama: row b's tokens seqs[b]
    follow its cache.lengths[b] entries, padded to one length T (the cache counts each row's own
    tokens only) -> ln_f(h_N) (B, T, C) and logits (B, T, V): row b's first len(seqs[b]) are its
    tokens'.
    Example: feed(model, RaggedCache(model.config, 2), [[1, 2, 3], [4]])[1][1, 0]  (after [4])"""
    if not isinstance(cache, RaggedCache):  # a KVCache has one length for every row
        raise ValueError(f"feed needs a minispec.batch.RaggedCache, got a {type(cache).__name__}")
    like = model.new_cache(1, size=1).k  # (n_layer, 1, heads, entries, hs): this model's kind
    if cache.k.shape[::2] != like.shape[::2] or cache.k.dtype != like.dtype:
        raise ValueError("the RaggedCache was made for another model or dtype: "
                         "minispec.batch.loop.new_cache(model, rows)")
    if len(seqs) != len(cache.lengths):
        raise ValueError(f"{len(seqs)} rows of tokens for a cache of {len(cache.lengths)} rows")
    if not seqs or any(isinstance(s, str) or not hasattr(s, "__iter__") for s in seqs):
        raise ValueError(f"feed needs rows of token ids, at least one, got {seqs!r:.60}")
    seqs = [[whole(t, "each token id", 0) for t in s] for s in seqs]  # tuples, tensors: lists
    L, n, T = cache.lengths, [len(s) for s in seqs], max(len(s) for s in seqs)
    if max(L) + T > cache.size:
        raise ValueError(f"the KV cache holds {cache.size} entries, {max(L) + T} needed")
    if (end := max(a + b for a, b in zip(L, n))) > model.config.block_size:  # a Llama ran on
        raise ValueError(f"a row would reach position {end - 1}: the model's positions end at "
                         f"block_size - 1 = {model.config.block_size - 1}")
    dev = model.wte.weight.device
    pad = [s + [0] * (T - len(s)) for s in seqs]  # (B, T): each row padded with token 0
    idx = torch.tensor(pad, dtype=torch.long, device=dev)  # long: rows all empty are no floats
    if len(set(L)) == len(set(n)) == 1:  # rows alike: plain causal attention
        pos, mask = torch.arange(L[0], L[0] + T), None
    else:  # each row's own positions (padding: position 0) and mask
        pos = torch.stack([F.pad(torch.arange(a, a + b), (0, T - b)) for a, b in zip(L, n)])
        mask = causal_mask(L, n, T).to(dev)
    x = model.embed(idx, pos.to(dev))
    turn = ()  # GPT added its positions in embed; a Llama's blocks turn q and k by them (RoPE)
    if not isinstance(model, GPT):
        turn = model.rotary(pos.to(dev), x.dtype)
        if mask is None and T > 1:  # a Llama's block leaves the causal mask to Llama.blocks
            mask = causal_mask(L, n, T).to(dev)
    for i, block in enumerate(model.h):
        x = block(x, *turn, cache, i, mask, None)  # start None: after each row's own entries
    cache.lengths = [a + b for a, b in zip(L, n)]
    h = model.ln_f(x)
    return h, model.lm_head(h)
