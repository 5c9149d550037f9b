"""Autoregressive decoding (the baseline) and THE speculative loop, one for every drafting method.

One round of speculative decoding (Leviathan et al. 2023, Alg. 1; Chen et al. 2023, Alg. 2):
  1. the drafter drafts a tree of at most gamma tokens (a chain is a tree with one branch), each
     sampled token with the q it was drawn from;
  2. the target scores the uncached context and every drafted token in ONE forward pass (tree
     attention), giving p at the root and after every node;
  3. verify.verify_tree keeps a path of drafts and adds one token of the target's own (a
     correction, or a bonus token after a leaf);
  4. the target's KV cache keeps only the kept path, and the drafter is told what was kept.
Every round costs one target call and yields between 1 and (depth of the tree) + 1 tokens.
"""
import time
from dataclasses import dataclass

import torch

from .adaptive import as_policy
from .batch import feed
from .drafters import as_drafter
from .sampling import check_sampling_args, probs, sample
from .tree import Tree
from .verify import multi_draft_accept, verify_tree


@dataclass
class Step:
    """One target call: the drafted tree, the path of it the target kept, and the token it added."""
    tree: Tree
    path: list   # kept node indices, the root's child first
    token: int   # the target's own token after them

    @property
    def accepted(self):  # drafted tokens kept
        return len(self.path)

    @property
    def drafted(self):
        """The kept tokens, then the rest of the draft's most probable branch (what a trace shows)."""
        out, node = [self.tree.tokens[i] for i in self.path], self.path[-1] if self.path else -1
        while self.tree.children(node):
            node = max(self.tree.children(node).values(), key=lambda i: self.tree.scores[i])
            out.append(self.tree.tokens[node])
        return out

    @property
    def bonus(self):  # the kept path reached a leaf: the added token is a free extra
        return not self.tree.children(self.path[-1] if self.path else -1)


@dataclass
class Stats:
    tokens_per_call: float    # new tokens per target call (the survey's efficiency measure)
    kept_fraction: float      # drafted tokens kept / drafted tokens (tree nodes count); alpha is theory's
    target_calls: int
    draft_calls: int          # the drafter's forward passes
    drafted: int              # drafted tokens (tree nodes) the target scored
    wall_time: float          # seconds
    tokens_per_second: float


@dataclass
class Result:
    tokens: list   # the new tokens only
    steps: list    # one Step per target call (empty for plain generate)
    stats: Stats


def _finish(ids, context, steps, max_new_tokens, eos_token, t0, draft_calls=0):
    """Cut the new tokens at max_new_tokens and right after the first eos_token; the stats."""
    tokens = context[len(ids):][:max_new_tokens]
    if eos_token is not None and eos_token in tokens:
        tokens = tokens[:tokens.index(eos_token) + 1]
    wall, calls = time.perf_counter() - t0, len(steps) or len(tokens)
    drafted = sum(len(s.tree.tokens) for s in steps)
    kept = sum(s.accepted for s in steps) / drafted if drafted else 0.0
    return Result(tokens, steps, Stats(len(tokens) / calls, kept, calls, draft_calls, drafted, wall, len(tokens) / wall))


def tokens_left(prompt, context, max_new_tokens, eos_token):
    """How many more tokens a row wants: 0 once it has max_new_tokens new ones or has emitted eos_token."""
    new = context[len(prompt):]
    return 0 if eos_token in new else max_new_tokens - len(new)


def rows(model, ids, max_new_tokens, temperature, top_k, top_p, crop_prompt, eos_token=None):
    """Check the arguments. A batch (a list of prompts) -> (its prompts, True); one prompt -> ([it], False);
    each prompt a list of ints (its end only, if crop_prompt and too long)."""
    check_sampling_args(temperature, top_k, top_p)
    V, block = model.config.vocab_size, model.config.block_size
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens}")
    if max_new_tokens >= block:
        raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in block_size={block}")
    if isinstance(ids, str):
        raise ValueError("ids must be token ids, not text: use minispec.encode(text)")
    if eos_token is not None and (int(eos_token) != eos_token or not 0 <= eos_token < V):
        raise ValueError(f"eos_token must be a token id in [0, {V}) or None, got {eos_token}")
    row = lambda x: isinstance(x, (list, tuple)) or torch.is_tensor(x) and x.dim() > 0
    batch = isinstance(ids, (list, tuple)) and len(ids) > 0 and row(ids[0])
    batch = batch or torch.is_tensor(ids) and ids.dim() == 2 and len(ids) > 1  # (B, T): B prompts of T tokens
    prompts = []
    for p in ids if batch else [ids]:
        p = [int(i) for i in (p.flatten().tolist() if torch.is_tensor(p) else p)]
        if not p:
            raise ValueError("the prompt is empty: give at least one token id")
        if not all(0 <= i < V for i in p):
            raise ValueError(f"the prompt has ids outside [0, {V}): give token ids in that range")
        if len(p) + max_new_tokens > block and not crop_prompt:
            raise ValueError(f"prompt ({len(p)} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                             f"block_size={block}; shorten it or pass crop_prompt=True to keep its end")
        prompts.append(p[max(len(p) + max_new_tokens - block, 0):])  # crop_prompt: keep the end that fits
    return prompts, batch


@torch.inference_mode()
def generate(model, ids, max_new_tokens=64, temperature=0.0, top_k=None, top_p=None, seed=0,
             eos_token=None, crop_prompt=False):
    """Plain autoregressive decoding with a KV cache: one target call per token (per batch of rows).

    ids: a prompt, or a list of prompts of any lengths (a batch: a list of Results comes back).
    Example: generate(load_model("target"), encode("def "), 16).tokens
    """
    prompts, batch = rows(model, ids, max_new_tokens, temperature, top_k, top_p, crop_prompt, eos_token)
    g, cache, t0 = torch.Generator().manual_seed(seed), model.new_cache(len(prompts)), time.perf_counter()
    contexts = [list(p) for p in prompts]
    wanted = lambda b: tokens_left(prompts[b], contexts[b], max_new_tokens, eos_token)
    while any(map(wanted, range(len(prompts)))):
        new = [c[L:] for c, L in zip(contexts, cache.lengths)]  # a finished row feeds its last token, then nothing
        logits = feed(model, cache, new)[1]  # (B, T, V): one target call for every row
        for b in filter(wanted, range(len(prompts))):
            p = probs(logits[b, len(new[b]) - 1], temperature, top_k, top_p).cpu()  # (V,)
            contexts[b].append(sample(p, g) if temperature > 0 else int(p.argmax()))
    out = [_finish(p, c, [], max_new_tokens, eos_token, t0) for p, c in zip(prompts, contexts)]
    return out if batch else out[0]


@torch.inference_mode()
def speculative_generate(target, drafter, ids, max_new_tokens=64, gamma=4, temperature=0.0, top_k=None,
                         top_p=None, seed=0, eos_token=None, crop_prompt=False, rule=multi_draft_accept):
    """`drafter` (a GPT, or any Drafter, e.g. load_drafter("hydra", target)) drafts, `target` verifies.

    ids: a prompt or a batch, as for generate. Each row keeps its own number of drafts and its cache rolls back
        to its own length (batch.py); the rows share gamma (a policy sees every row's rounds), wall_time, draft_calls.
    gamma: drafted tokens the target scores per call (chain length, or tree nodes); an int, or a
        draft-length policy from minispec.adaptive (e.g. Heuristic(4)).
    temperature 0: output identical to generate(target, ...). temperature > 0: lossless, distributed
        exactly as generate's. rule: the per-node sampling rule (verify.typical_accept is lossy).
    In float32 a forward over many tokens may round differently from one over a single token, so a
    near-tie between two argmaxes could break the other way: the exactness tests also run in float64.
    """
    policy, drafter = as_policy(gamma), as_drafter(drafter, target)  # an int gamma < 1 raises ValueError
    prompts, batch = rows(target, ids, max_new_tokens, temperature, top_k, top_p, crop_prompt, eos_token)
    if len(prompts) > 1 and not drafter.batched:
        raise ValueError(f"{type(drafter).__name__} drafts one prompt at a time: decode a batch with a GPT "
                         "drafter (a chain), PromptLookupDrafter or a FallbackDrafter of the two")
    g, B = torch.Generator().manual_seed(seed), len(prompts)
    cache = target.new_cache(B, size=2 * target.config.block_size)  # room for a tree after the context
    drafter.reset(target, cache)
    policy.reset()
    contexts, steps = [list(p) for p in prompts], [[] for _ in prompts]
    calls0, t0 = drafter.calls, time.perf_counter()
    wanted = lambda b: tokens_left(prompts[b], contexts[b], max_new_tokens, eos_token)
    while any(map(wanted, range(B))):
        depths = [max(wanted(b) - 1, 0) for b in range(B)]  # a round adds at most depth + 1 tokens to a row
        trees = drafter.draft_rows(contexts, policy.gamma, temperature, top_k, top_p, g, depths)
        hidden, logits = drafter.score_rows(target, cache, contexts, trees)  # THE target call: (T_b, C), (T_b, V) a row
        paths, tokens = [[] for _ in range(B)], [None] * B  # a finished row keeps nothing
        for b in filter(wanted, range(B)):
            p = probs(logits[b][-len(trees[b].tokens) - 1:], temperature, top_k, top_p).cpu()  # (1 + N, V)
            paths[b], tokens[b] = verify_tree(trees[b], p, temperature, g, rule)
        cache.keep([len(c) for c in contexts], paths)  # each row: its context and its kept path, in order
        drafter.accept_rows(contexts, trees, paths, hidden, logits)
        for b in filter(lambda b: tokens[b] is not None, range(B)):
            contexts[b] += [trees[b].tokens[i] for i in paths[b]] + [tokens[b]]
            steps[b].append(Step(trees[b], paths[b], tokens[b]))
            policy.update(steps[b][-1])
    out = [_finish(p, c, s, max_new_tokens, eos_token, t0, drafter.calls - calls0)
           for p, c, s in zip(prompts, contexts, steps)]
    return out if batch else out[0]
