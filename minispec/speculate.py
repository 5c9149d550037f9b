"""Autoregressive decoding (the baseline) and THE speculative loop: draft, verify, accept, roll back.

One round of speculative decoding (Leviathan et al. 2023, Alg. 1; Chen et al. 2023, Alg. 2),
for every drafter (a separate model, prompt lookup, early exit, heads, lookahead):
  1. the drafter drafts a tree of at most gamma tokens (a chain is a tree with one branch), each
     sampled token with the q it was drawn from;
  2. the target scores the uncached context and every drafted token in ONE forward pass (tree
     attention), giving p at the root and after every node;
  3. verify.verify_tree keeps a path of drafts and adds one token of the target's own (a
     correction, or a bonus token after a leaf): greedy at temperature 0, lossless otherwise;
  4. the target's KV cache keeps only the accepted path, and the drafter is told what was kept.
Every round costs one target call and yields between 1 and (depth of the tree) + 1 tokens.
"""
import time
from dataclasses import dataclass

import torch

from .adaptive import as_policy
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

    def __getitem__(self, name):  # stats["target_calls"] reads like a dict, too
        return getattr(self, name)


@dataclass
class Result:
    tokens: list   # the new tokens only
    steps: list    # one Step per target call (empty for plain generate)
    stats: Stats


def prepare(model, ids, max_new_tokens, temperature, top_k, top_p, crop_prompt):
    """Check the arguments; the prompt as a list of ints (its end only, if crop_prompt and too long)."""
    check_sampling_args(temperature, top_k, top_p)
    if isinstance(ids, str):
        raise ValueError("ids must be token ids, not text: use minispec.encode(text)")
    ids = [int(i) for i in (ids.flatten().tolist() if torch.is_tensor(ids) else ids)]
    V, block = model.config.vocab_size, model.config.block_size
    if not ids or not all(0 <= i < V for i in ids):
        raise ValueError(f"the prompt is empty or has ids outside [0, {V}): give token ids in that range")
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens}")
    if max_new_tokens >= block:
        raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in block_size={block}")
    if len(ids) + max_new_tokens > block:
        if not crop_prompt:
            raise ValueError(f"prompt ({len(ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                             f"block_size={block}; shorten it or pass crop_prompt=True to keep its end")
        ids = ids[len(ids) + max_new_tokens - block:]
    return ids


def _finish(ids, context, steps, max_new_tokens, eos_token, t0, draft_calls=0):
    """Cut the new tokens at max_new_tokens and right after the first eos_token; the stats."""
    tokens = context[len(ids):][:max_new_tokens]
    if eos_token is not None and eos_token in tokens:
        tokens = tokens[:tokens.index(eos_token) + 1]
    wall, calls = time.perf_counter() - t0, len(steps) or len(tokens)
    drafted = sum(len(s.tree.tokens) for s in steps)
    kept = sum(s.accepted for s in steps) / drafted if drafted else 0.0
    return Result(tokens, steps, Stats(len(tokens) / calls, kept, calls, draft_calls, drafted, wall, len(tokens) / wall))


@torch.inference_mode()
def generate(model, ids, max_new_tokens=64, temperature=0.0, top_k=None, top_p=None, seed=0,
             eos_token=None, crop_prompt=False):
    """Plain autoregressive decoding with a KV cache: one target call per token.

    Example: generate(load_model("target"), encode("def "), 16).tokens
    """
    ids = prepare(model, ids, max_new_tokens, temperature, top_k, top_p, crop_prompt)
    g, dev = torch.Generator().manual_seed(seed), model.wte.weight.device
    cache, t0, context = model.new_cache(), time.perf_counter(), list(ids)
    new = ids
    while len(context) - len(ids) < max_new_tokens and eos_token not in context[len(ids):]:
        p = probs(model(torch.tensor([new], device=dev), cache)[0, -1], temperature, top_k, top_p).cpu()  # (V,)
        context.append(sample(p, g) if temperature > 0 else int(p.argmax()))
        new = context[-1:]
    return _finish(ids, context, [], max_new_tokens, eos_token, t0)


@torch.inference_mode()
def speculative_generate(target, drafter, ids, max_new_tokens=64, gamma=4, temperature=0.0, top_k=None,
                         top_p=None, seed=0, eos_token=None, crop_prompt=False, rule=multi_draft_accept):
    """Speculative decoding: `drafter` (a GPT, or any Drafter, e.g. load_drafter("hydra", target)) drafts,
    `target` verifies. The one loop for every method.

    gamma: drafted tokens the target scores per call (chain length, or tree nodes); an int, or a
        draft-length policy from minispec.adaptive (e.g. Heuristic(4)).
    temperature 0: output identical to generate(target, ...). temperature > 0: lossless, distributed
        exactly as generate's. rule: the per-node sampling rule (verify.typical_accept is lossy).
    In float32 a forward over many tokens may round differently from one over a single token, so a
    near-tie between two argmaxes could break the other way: the exactness tests also run in float64.
    """
    policy, drafter = as_policy(gamma), as_drafter(drafter, target)  # an int gamma < 1 raises ValueError
    ids = prepare(target, ids, max_new_tokens, temperature, top_k, top_p, crop_prompt)
    g = torch.Generator().manual_seed(seed)
    cache = target.new_cache(size=2 * target.config.block_size)  # room for a tree after the context
    drafter.reset(target, cache)
    policy.reset()
    context, steps, calls0, t0 = list(ids), [], drafter.calls, time.perf_counter()
    while len(context) - len(ids) < max_new_tokens and eos_token not in context[len(ids):]:
        depth = max_new_tokens - (len(context) - len(ids)) - 1  # a round adds at most depth + 1 tokens
        tree = drafter.draft(context, policy.gamma if depth else 0, temperature, top_k, top_p, g, depth)
        hidden, logits = drafter.score(target, cache, context, tree)  # the one target call: (T, C), (T, V)
        p = probs(logits[-len(tree.tokens) - 1:], temperature, top_k, top_p).cpu()  # (1 + N, V): root, nodes
        path, token = verify_tree(tree, p, temperature, g, rule)
        cache.keep(len(context), path)  # the context and the kept path, in order
        drafter.accept(context, tree, path, hidden, logits)
        context += [tree.tokens[i] for i in path] + [token]
        steps.append(Step(tree, path, token))
        policy.update(steps[-1])
    return _finish(ids, context, steps, max_new_tokens, eos_token, t0, drafter.calls - calls0)
