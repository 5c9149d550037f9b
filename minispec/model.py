"""A GPT-2 language model over bytes, with a KV cache that can be cropped.

The architecture is GPT-2's exactly (learned positions, pre-LayerNorm with eps 1e-5, tanh-GELU,
tied input/output embeddings, biases everywhere), so weights convert losslessly to and from
`transformers`' GPT2LMHeadModel (minispec.bridge.hf). Two differences from nanoGPT matter for
speculative decoding: the model returns logits at *every* position (verifying gamma drafted tokens
needs gamma + 1 next-token distributions from one forward pass), and the KV cache can be cropped
back to any prefix (which is how rejected draft tokens are undone).

References: Radford et al. 2019 (GPT-2); Karpathy's nanoGPT.
"""
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .sampling import whole

WEIGHTS_DIR = Path(__file__).parent / "weights"


@dataclass
class GPTConfig:
    vocab_size: int = 256   # bytes: any text (and any binary) can be encoded
    block_size: int = 256   # longest context, prompt and generated tokens together
    n_layer: int = 6        # transformer blocks
    n_head: int = 6         # attention heads per block
    n_embd: int = 384       # width of the residual stream


def encode(text):
    """Text -> list of byte values. Example: encode("hi") == [104, 105]"""
    return list(text.encode("utf-8"))


def decode(ids):
    """List of byte values -> text; bytes that are not valid UTF-8 become U+FFFD."""
    return bytes(whole(i, "a byte", 0, 256) for i in ids).decode("utf-8", errors="replace")


class KVCache:
    """Keys and values of every layer for the tokens seen so far, for rows of one length.

    Storage is allocated once for `size` entries (default block_size); `length` says how many are
    valid, so rolling back a rejected draft is free: `crop(n)` just sets the length (entries past
    it are never read). A token tree needs more entries than positions (siblings share a
    position): `keep` moves the accepted branch next to the context.
    Whoever runs blocks on it writes at an explicit `start` and sets `length` to start + T.
    """

    def __init__(self, config, batch_size=1, size=None, device=None, dtype=None):
        size = config.block_size if size is None else whole(size, "the cache's size (entries)")
        shape = (config.n_layer, batch_size, config.n_head, size, config.n_embd // config.n_head)
        self.k = torch.zeros(shape, device=device, dtype=dtype)  # (n_layer, B, H, size, hs)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0

    @property
    def size(self):
        return self.k.shape[3]

    def crop(self, n):
        """Forget everything after the first n entries."""
        self.length = whole(n, f"crop's n (cache length {self.length})", 0, self.length + 1)

    def keep(self, start, nodes):
        """Keep entries start + i for i in `nodes` (a tree's accepted path), moved to start, ..."""
        room = self.length - whole(start, "keep's start", 0, self.length + 1)  # entries after it
        nodes = [whole(i, f"each kept node ({room} entries after start)", 0, room) for i in nodes]
        idx = start + torch.tensor(nodes, dtype=torch.long, device=self.k.device)
        self.k[:, :, :, start:start + len(nodes)] = self.k[:, :, :, idx]  # (n_layer, B, H, n, hs)
        self.v[:, :, :, start:start + len(nodes)] = self.v[:, :, :, idx]
        self.crop(start + len(nodes))

    def write(self, layer, k, v, start):
        """Store new keys/values (B, H, T, hs) at entries start..start + T - 1 of `layer`; return
        the keys and values of every entry up to them (B, H, start + T, hs)."""
        T = k.shape[2]
        self.k[layer, :, :, start:start + T] = k
        self.v[layer, :, :, start:start + T] = v
        return self.k[layer, :, :, :start + T], self.v[layer, :, :, :start + T]


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x, cache=None, layer=0, mask=None, start=0):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if cache is not None:  # write the new keys/values after the cached ones, attend to all
            k, v = cache.write(layer, k, v, start)  # (B, H, S, hs)
        S = k.shape[2]  # keys: the S - T cached ones, then the T new ones
        # mask (T, S) or (B, T, S) bool, e.g. a tree's: query i attends to key j where mask[i, j]
        causal = mask is None and T == S > 1  # no mask, nothing cached: SDPA's own causal mask
        if mask is None and 1 < T < S:  # no mask after cached keys: query i sees keys to S - T + i
            mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
        if mask is not None and (mask.dtype != torch.bool or mask.shape[-2:] != (T, S)):  # float:
            raise ValueError(f"mask must be a bool tensor (T, S) = ({T}, {S}), True: attend (a "
                             f"float one SDPA would ADD), got {mask.dtype} {tuple(mask.shape)}")
        if mask is not None and mask.dim() == 3:  # one mask per row: the same for every head
            mask = mask[:, None]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)  # T = 1: all
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # GPT-2's "gelu_new"


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=1e-5)
        self.mlp = MLP(config)

    def forward(self, x, cache=None, layer=0, mask=None, start=0):
        x = x + self.attn(self.ln_1(x), cache, layer, mask, start)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2. Example: GPT(GPTConfig(vocab_size=4, n_layer=1, n_head=1, n_embd=8))(idx)"""

    def __init__(self, config):
        super().__init__()
        if config.n_head < 1 or config.n_embd % config.n_head:  # n_head 0: a ValueError too
            raise ValueError(f"n_embd={config.n_embd} must be divisible by n_head={config.n_head}")
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=1e-5)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings, as in GPT-2
        for m in self.modules():  # GPT-2's init: N(0, 0.02) weights, zero biases
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * config.n_layer))

    def new_cache(self, batch_size=1, size=None):
        """An empty KVCache on the weights' device and dtype (size entries, default block_size)."""
        return KVCache(self.config, batch_size, size, self.wte.weight.device, self.wte.weight.dtype)

    def embed(self, idx, pos):
        """Token ids (B, T) at positions (T,) or (B, T) -> the first hidden states h_0 (B, T, C)."""
        if pos.numel() and (n := int(pos.max()) + 1) > self.config.block_size:
            raise ValueError(f"position {n - 1} (a sequence of {n} tokens) exceeds "
                             f"block_size={self.config.block_size}")
        if idx.numel() and not 0 <= int(idx.min()) <= int(idx.max()) < self.config.vocab_size:
            raise ValueError(f"a token id is outside the vocabulary [0, {self.config.vocab_size})")
        return self.wte(idx) + self.wpe(pos)

    def blocks(self, x, cache=None, layers=None, mask=None, start=None):
        """Run blocks `layers` (default all) on x (B, T, C). With a cache, each layer writes the T
        new keys/values at entries start.. (default: after the `length` cached ones), and the
        cache's length becomes start + T: the one place a cache advances."""
        start = (cache.length if start is None else start) if cache is not None else 0
        if cache is not None and start + x.shape[1] > cache.size:
            raise ValueError(f"the KV cache holds {cache.size} entries, {start + x.shape[1]} "
                             f"needed (block_size={self.config.block_size}; new_cache(size=...))")
        kv = (self.config.n_layer, self.config.n_head, self.config.n_embd // self.config.n_head)
        if cache is not None and (cache.k.shape[::2] != kv or cache.k.dtype != x.dtype):
            raise ValueError("the KV cache was made for another model or dtype: model.new_cache()")
        for i in range(self.config.n_layer) if layers is None else layers:
            x = self.h[i](x, cache, i, mask, start)
        if cache is not None:
            cache.length = start + x.shape[1]
        return x

    def features(self, idx, cache=None, pos=None, mask=None):
        """idx (B, T) -> ln_f(h_N) (B, T, C): what the head reads (and Medusa, Hydra and EAGLE).

        cache: a KVCache; the new tokens follow its `length` cached ones and extend it.
        pos, mask: position ids (T,) and a (T, length + T) bool attention mask (default:
            consecutive, causal), to score a token tree in one pass (tree.score_tree).
        """
        if not (torch.is_tensor(idx) and idx.dim() == 2):  # model(torch.tensor(ids)) is a slip
            raise ValueError(f"idx must be (B, T) token ids, as torch.tensor([ids]); got {idx!r}")
        if pos is None:
            pos = getattr(cache, "length", 0) + torch.arange(idx.shape[1], device=idx.device)
        return self.ln_f(self.blocks(self.embed(idx, pos), cache, mask=mask))

    def forward(self, idx, cache=None, pos=None, mask=None):
        """idx (B, T) token ids -> next-token logits at every position (B, T, V); see features."""
        return self.lm_head(self.features(idx, cache, pos, mask))

