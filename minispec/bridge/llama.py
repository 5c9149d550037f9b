"""A Llama (Touvron et al. 2023) on minispec's KV cache, so a real LLM runs through the one loop.

Llama changes four things in GPT-2's block, and keeps the rest (pre-norm residual blocks, a
cache that can be cropped, logits at every position, tied embeddings in the small ones):
  - RMSNorm (Zhang & Sennrich 2019) instead of LayerNorm: x / sqrt(mean(x^2) + eps) * w;
  - rotary positions (RoPE, Su et al. 2021) instead of learned ones: no position is added to the
    input; instead every query and key is rotated by an angle proportional to its position, so
    q . k depends only on how far apart the two tokens are;
  - SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x)) instead of GELU's two matrices;
  - grouped-query attention (Ainslie et al. 2023): n_kv_head key/value heads, each shared by
    n_head // n_kv_head query heads, so the cache is that many times smaller.
The attribute names follow minispec's GPT (`wte`, `h`, `ln_f`, `lm_head`, `embed`, `blocks`,
`features`, `new_cache`), so every drafter that needs no trained companion (prompt lookup,
hand-built trees, lookahead, the target drafting with its own layers) runs on it unchanged.

Tree attention under rotary positions: a drafted node sits at position n - 1 + depth whatever its
branch (tree.score_tree passes those positions), so it is rotated by its depth, and the tree mask
lets it see only its ancestors: its logits are exactly those of its branch fed as a plain chain.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..model import KVCache
from ..sampling import real, whole
from .linear import Linear


@dataclass
class LlamaConfig:
    vocab_size: int = 49152     # SmolLM2's byte-level BPE
    block_size: int = 8192      # longest context (max_position_embeddings)
    n_layer: int = 30           # transformer blocks
    n_head: int = 9             # query heads per block
    n_kv_head: int = 3          # key/value heads (grouped-query attention)
    n_embd: int = 576           # width of the residual stream
    n_hidden: int = 1536        # SwiGLU's inner width
    rope_base: float = 100000.0  # RoPE's base b: pair i turns at b^(-2i/hs) radians a position
    norm_eps: float = 1e-5      # RMSNorm's epsilon

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_kv_head", "n_embd",
                     "n_hidden"):
            setattr(self, name, whole(getattr(self, name), name))  # 8.0 -> 8
        base, eps = real(self.rope_base, "rope_base"), real(self.norm_eps, "norm_eps")
        if not (0 < base < float("inf") and 0 <= eps < float("inf")):  # nan fails both
            raise ValueError(f"need rope_base > 0 and norm_eps >= 0, both finite, got "
                             f"{self.rope_base} and {self.norm_eps}")
        if self.n_head % self.n_kv_head or self.n_embd % (2 * self.n_head):  # RoPE turns pairs
            raise ValueError(f"need n_kv_head | n_head and an even head size n_embd / n_head, got "
                             f"{self.n_kv_head}, {self.n_head}, {self.n_embd}")


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * w (Zhang & Sennrich 2019): LayerNorm without the mean."""

    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):  # in at least float32, as transformers: fp16's x^2 overflows past 256
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return h.to(x.dtype) * self.weight


def rope(pos, hs, base, dtype):
    """Positions (T,) or (B, T) -> cos, sin (..., T, hs) of the angles pos * base^(-2i/hs).

    RoPE (Su et al. 2021) turns each pair of a head's dimensions (i, i + hs/2) (transformers'
    layout) by the angle pos * theta_i, theta_i = base^(-2i/hs): then
    rot(q, m) . rot(k, n) = f(q, k, m - n), attention sees only relative positions.
    """
    theta = 1.0 / base ** (torch.arange(0, hs, 2, device=pos.device, dtype=torch.float32) / hs)
    angles = pos[..., None].float() * theta  # (..., T, hs/2), in float32 as transformers does
    angles = torch.cat([angles, angles], -1)  # (..., T, hs)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x, cos, sin):
    """x (B, H, T, hs) turned by the angles: x cos + rotate_half(x) sin, pair (i, i + hs/2)."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], -1)  # (-x2, x1)
    if cos.dim() == 3:  # positions per row (B, T, hs): the same for every head
        cos, sin = cos[:, None], sin[:, None]
    return x * cos + turned * sin


class LlamaCache(KVCache):
    """minispec's KVCache with n_kv_head heads whose storage grows as it is written: `size`
    entries are allowed, only those written are allocated (an 8,192-position cache for 30 layers
    in fp32 would be 377 MB)."""

    def __init__(self, config, batch_size=1, size=None, device=None, dtype=None):
        self.limit = config.block_size if size is None else whole(size, "the cache's size")
        batch_size, hs = whole(batch_size, "batch_size"), config.n_embd // config.n_head
        shape = (config.n_layer, batch_size, config.n_kv_head, 0, hs)
        self.k = torch.zeros(shape, device=device, dtype=dtype)  # (n_layer, B, H_kv, entries, hs)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0

    @property
    def size(self):
        return self.limit

    def write(self, layer, k, v, start):
        """As KVCache.write; first grows the storage (to at least twice the entries) if needed."""
        need = start + k.shape[2]
        if need > self.k.shape[3]:
            more = list(self.k.shape)
            more[3] = min(max(need, 2 * self.k.shape[3], 256), self.limit) - self.k.shape[3]
            self.k = torch.cat([self.k, self.k.new_zeros(more)], 3)
            self.v = torch.cat([self.v, self.v.new_zeros(more)], 3)
        return super().write(layer, k, v, start)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c.n_head
        self.n_kv_head = c.n_kv_head
        self.hs = c.n_embd // c.n_head
        self.q_proj = Linear(c.n_embd, c.n_head * self.hs, bias=False)
        self.k_proj = Linear(c.n_embd, c.n_kv_head * self.hs, bias=False)
        self.v_proj = Linear(c.n_embd, c.n_kv_head * self.hs, bias=False)
        self.o_proj = Linear(c.n_head * self.hs, c.n_embd, bias=False)

    def forward(self, x, cos, sin, cache=None, layer=0, mask=None, start=0):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.hs).transpose(1, 2)  # (B, H, T, hs)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.hs).transpose(1, 2)  # (B, H_kv, T, hs)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # the cache keeps keys already turned
        if cache is not None:
            k, v = cache.write(layer, k, v, start)  # (B, H_kv, S, hs)
        if mask is not None and mask.dim() == 3:  # a mask per row (B, T, S): same for all heads
            mask = mask[:, None]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           is_causal=mask is None and T == k.shape[2] > 1,
                                           enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    """SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x))."""

    def __init__(self, c):
        super().__init__()
        self.gate_proj = Linear(c.n_embd, c.n_hidden, bias=False)
        self.up_proj = Linear(c.n_embd, c.n_hidden, bias=False)
        self.down_proj = Linear(c.n_hidden, c.n_embd, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.n_embd, c.norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.n_embd, c.norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, cache=None, layer=0, mask=None, start=0):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, layer, mask, start)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """A Llama with tied embeddings. Example: Llama(LlamaConfig(vocab_size=8, n_layer=1,
    n_head=2, n_kv_head=1, n_embd=8, n_hidden=16))(idx) -> logits (B, T, V)"""

    def __init__(self, config):
        super().__init__()
        config.__post_init__()  # checked again: a config's fields may have changed since
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = RMSNorm(config.n_embd, config.norm_eps)
        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in SmolLM2
        for m in self.modules():  # a random model for tests: N(0, 0.02) weights
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def new_cache(self, batch_size=1, size=None):
        """An empty LlamaCache on the weights' device and dtype, growing up to size entries."""
        w = self.wte.weight
        return LlamaCache(self.config, batch_size, size, w.device, w.dtype)

    def embed(self, idx, pos):
        """Token ids (B, T) -> h_0 (B, T, C). No position is added: blocks rotates by `pos`."""
        if idx.numel() and not 0 <= int(idx.min()) <= int(idx.max()) < self.config.vocab_size:
            raise ValueError(f"a token id is outside the vocabulary [0, {self.config.vocab_size})")
        return self.wte(idx)

    def rotary(self, pos, dtype):
        """Positions (T,) or (B, T) -> RoPE's cos, sin (..., T, hs) for this model's heads."""
        return rope(pos, self.config.n_embd // self.config.n_head, self.config.rope_base, dtype)

    def blocks(self, x, cache=None, layers=None, mask=None, start=None, pos=None):
        """Run blocks `layers` (default all) on x (B, T, C), as GPT.blocks; pos (T,) or (B, T):
        each token's position for RoPE (default: its cache entry, start + 0..T-1, a chain)."""
        start = (cache.length if start is None else start) if cache is not None else 0
        c, T, S = self.config, x.shape[1], start + x.shape[1]
        if cache is not None and S > cache.size:
            raise ValueError(f"the KV cache holds {cache.size} entries, {S} needed (block_size="
                             f"{c.block_size})")
        pos = torch.arange(start, S, device=x.device) if pos is None else pos
        ok = torch.is_tensor(pos) and not pos.is_floating_point() and pos.shape[-1:] == (T,)
        if not (ok and pos.shape[:-1] in ((), x.shape[:1])  # (T,) or (B, T), in the block
                and (T == 0 or 0 <= int(pos.min()) <= int(pos.max()) < c.block_size)):
            raise ValueError(f"pos must be (T,) or (B, T) = ({len(x)}, {T}) integer positions "
                             f"in [0, block_size={c.block_size}), got {pos!r:.60}")
        if cache is not None and cache.k.shape[1] != len(x):
            raise ValueError(f"the KV cache has {cache.k.shape[1]} rows, the input {len(x)}: "
                             f"model.new_cache(batch_size={len(x)})")
        kv = (c.n_layer, c.n_kv_head, c.n_embd // c.n_head)  # another model's cache or dtype: no
        if cache is not None and (cache.k.shape[::2] != kv or cache.k.dtype != x.dtype):
            raise ValueError("the KV cache was made for another model or dtype: model.new_cache()")
        cos, sin = self.rotary(pos, x.dtype)
        if mask is not None and (mask.dtype != torch.bool or mask.shape[-2:] != (T, S)):  # a float
            raise ValueError(f"mask must be a bool tensor (T, S) = ({T}, {S}), True: attend (a "
                             f"float one SDPA would ADD), got {mask.dtype} {tuple(mask.shape)}")
        if mask is None and 1 < T < S:  # causal, once for all blocks: query i sees keys <= its own
            mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
        for i in range(self.config.n_layer) if layers is None else layers:
            x = self.h[i](x, cos, sin, cache, i, mask, start)
        if cache is not None:
            cache.length = start + x.shape[1]
        return x

    def features(self, idx, cache=None, pos=None, mask=None):
        """idx (B, T) -> ln_f(h_N) (B, T, C); pos and mask as in GPT.features (a token tree)."""
        start = cache.length if cache is not None else 0
        ints = torch.is_tensor(idx) and idx.dtype in (torch.int64, torch.int32)  # what wte takes
        if not (ints and idx.dim() == 2):  # model(torch.tensor(ids)) is a slip
            raise ValueError(f"idx must be (B, T) token ids, as torch.tensor([ids]); got {idx!r}")
        if pos is None:
            pos = torch.arange(start, start + idx.shape[1], device=idx.device)
        return self.ln_f(self.blocks(self.embed(idx, pos), cache, mask=mask, pos=pos))

    def forward(self, idx, cache=None, pos=None, mask=None):
        """idx (B, T) token ids -> next-token logits at every position (B, T, V)."""
        return self.lm_head(self.features(idx, cache, pos, mask))

