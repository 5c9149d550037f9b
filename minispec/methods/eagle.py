"""EAGLE: draft in the target's feature space (Li et al. 2024; EAGLE-2's dynamic trees, Li et al.
2024b); survey section 2.1.2, dependent drafters.

The target's feature at t is f_t = ln_f(h_N)_t, what its head reads: p_{t+1} = softmax(W_E f_t).
The next *feature* is easier to predict than the next token, and the token sampled at t + 1 tells
the head which branch it is on. EAGLE's head is one transformer block with its own KV cache:

    f_hat_{t+1} = Block(FC([f_t ; e(x_{t+1})])),        q_{t+2} = softmax(W_E f_hat_{t+1}),

where e and W_E are the target's own (frozen) embedding and head. At depth 1 of a draft the head
reads features the verification pass computed; deeper, its own predictions f_hat. The head is
trained on the frozen target's features by scripts/train_eagle.py (its loss:
minispec.kit.training.eagle_loss).
"""
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..drafters import Drafter, pick
from ..model import GPT, WEIGHTS_DIR, Block, GPTConfig, KVCache
from ..tree import Tree, check_tree_options, grow_tree, tree_mask
from .args import check_model, tree_args
from .heads import fit, read


class EagleHead(nn.Module):
    """FC([f_t; e(x_{t+1})]) -> one Block -> f_hat_{t+1}. Example: EagleHead(target)(f, x)"""

    def __init__(self, target):
        super().__init__()
        c = check_model(target).config
        self.config = GPTConfig(c.vocab_size, c.block_size, 1, c.n_head, c.n_embd)
        self.fc = nn.Linear(2 * c.n_embd, c.n_embd)
        self.block = Block(self.config)
        self.target = (target,)  # a tuple: the frozen target is no submodule (not trained, saved)
        self.accuracy = None     # accuracy[d]: held-out top-1 accuracy at draft depth d + 1

    def forward(self, f, x, cache=None, mask=None):
        """Features f (B, T, C) at t and tokens x (B, T) at t + 1 -> f_hat (B, T, C) at t + 1."""
        e = F.embedding(x, self.target[0].wte.weight.detach())
        start = cache.length if cache is not None else 0
        out = self.block(self.fc(torch.cat([f, e], -1)), cache, 0, mask, start)  # None: causal
        if cache is not None:  # as GPT.blocks: who runs the block advances the cache
            cache.length = start + x.shape[1]
        return out

    def logits(self, f):
        return F.linear(f, self.target[0].lm_head.weight.detach())


def load_eagle(target, path=None):
    """The shipped EAGLE head on top of the shipped target (or a saved file)."""
    if not isinstance(check_model(target), GPT) or not isinstance(path, (str, Path, type(None))):
        raise ValueError(f"load_eagle(a GPT, None or a file's path), got {target!r:.40}, {path!r}")
    path = Path(path or WEIGHTS_DIR / "eagle_head.pt")
    if not path.exists():
        raise ValueError(f"no EAGLE head at {path}: give a saved file's path, or None for the "
                         "shipped head")
    ckpt = read(path)
    head = EagleHead(target).to(target.wte.weight)
    return fit(head, ckpt, path)


class EagleDrafter(Drafter):
    """EAGLE's head drafting a chain of gamma tokens (the default: on the benchmark prompts it
    keeps within 5% of the trees' tokens per call at temperature 0, more at 1, and runs faster:
    figures/eagle.md), or with branching an EAGLE-2 dynamic tree of gamma nodes (e.g. SGLang's
    defaults: branching=(4,) * 5, width=4), its siblings iid or (replacement=False) distinct
    draws. The first round has no features yet: no drafts.
    Example: speculative_generate(target, EagleDrafter(load_eagle(target)), ids, gamma=6)
    """

    def __init__(self, head, branching=None, width=None, score_temperature=1.0, replacement=True):
        branching, width = check_tree_options(branching, width, score_temperature, replacement)
        if not isinstance(head, EagleHead):  # a Llama's head: EagleLlamaDrafter
            raise ValueError(f"head must be a GPT's EAGLE head (load_eagle(target)), got "
                             f"{type(head).__name__}")
        self.replacement = replacement
        self.head = head
        self.model = head.target[0]
        self.branching = branching
        self.width = width
        self.score_temperature = score_temperature
        self.seen = None  # the tokens the features cover (None: none yet)
        self.vocab_size = head.config.vocab_size

    def reset(self, target, cache):
        if target is not self.model:
            raise ValueError("this EAGLE head was built for another model object (a reloaded "
                             "target is another one): build the drafter again on this target")
        w = self.model.wte.weight
        self.head.to(w)  # follow the target's device and dtype (model.double())
        size = 2 * self.head.config.block_size
        self.cache = KVCache(self.head.config, 1, size, w.device, w.dtype)
        self.pending = w.new_zeros(0, w.shape[1])  # true features (k, C) not fed yet
        self.n_ctx = 0  # head cache entries made of true features
        self.root = None  # the root's predicted feature, once the true ones are fed
        self.f = {}     # node -> its predicted feature f_hat
        self.seen = None

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context, gamma, depth = tree_args(context, gamma, depth)
        self.f = {}
        if gamma < 1 or depth == 0 or self.seen != context[:-1]:
            return Tree()  # the last token, or no features of this context yet: no drafts
        if self.branching:
            tree, calls = grow_tree(self.expand, context, gamma, self.branching[:depth], self.width,
                                    temperature, top_k, top_p, generator, self.score_temperature,
                                    self.cache.size - len(context), self.replacement)
            self.calls += calls
            return tree
        logits, tokens, qs = self.expand(context, None, None)[0], [], []  # (V,) after the root
        for _ in range(gamma if depth is None else min(gamma, depth)):
            if tokens:  # a chain: each step reads the last predicted feature and the token after it
                x = torch.tensor([tokens[-1:]], device=logits.device)
                self.f[-1] = self.head(self.f[-1][None, None], x, self.cache)[0, 0]
                logits = self.head.logits(self.f[-1])
            token, q = pick(logits, temperature, top_k, top_p, generator)
            tokens.append(token)
            qs.append(q)
            self.calls += 1
        return Tree.chain(tokens, qs)

    def expand(self, context, fed, nodes):
        """The head's logits after the root (nodes None) or after nodes a..b-1 of `fed`."""
        if nodes is None:  # feed the true features; the last output predicts the root's feature
            self.cache.crop(self.n_ctx)  # drafting again before accept: the drafts' entries go
            if len(self.pending):  # (else the root's is the feature the last draft predicted)
                k, dev = len(self.pending), self.pending.device
                x = torch.tensor([context[len(context) - k:]], device=dev)
                self.root = self.head(self.pending[None], x, self.cache)[0, -1]
                self.pending = self.pending[:0]
                self.n_ctx = self.cache.length
            self.f[-1] = self.root
            return self.head.logits(self.root[None])
        a, b = nodes
        f = torch.stack([self.f[fed.parents[i]] for i in range(a, b)])[None]  # each parent's f_hat
        x = torch.tensor([fed.tokens[a:b]], device=f.device)
        mask = tree_mask(fed.parents, self.n_ctx, 0, nodes).to(f.device)
        f_hat = self.head(f, x, self.cache, mask)[0]
        self.f.update(zip(range(a, b), f_hat))
        return self.head.logits(f_hat)

    def accept(self, context, tree, path, hidden, logits):
        """Keep the true features of what the target read and kept (paired with tokens next)."""
        root = len(hidden) - len(tree.tokens) - 1
        self.cache.crop(self.n_ctx)  # drop the drafted entries
        kept = hidden[[root + 1 + i for i in path]]
        self.pending = torch.cat([self.pending, hidden[:root + 1], kept])
        self.seen = list(context) + [tree.tokens[i] for i in path]
