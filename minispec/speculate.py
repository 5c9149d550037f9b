"""Autoregressive decoding (the baseline) and THE speculative loop, one for every drafting method.

One round of speculative decoding (Leviathan et al. 2023, Alg. 1; Chen et al. 2023, Alg. 2):
  1. draft: the drafter drafts a tree of at most gamma tokens (a chain is a tree with one
     branch), each sampled token with the q it was drawn from;
  2. one target call: the target scores the uncached context and every drafted token in ONE
     forward pass (tree attention), giving p at the root and after every node;
  3. verify: verify.verify_tree keeps a path of drafts and adds one token of the target's own (a
     correction, or a bonus token after a leaf);
  4. roll back: the target's KV cache keeps only the kept path, and the drafter is told.
Every round costs one target call and yields between 1 and (depth of the tree) + 1 tokens.
A list of prompts goes to the batched loop (minispec.batch.loop): batching is its own lesson.
"""
import time
from dataclasses import dataclass

import torch

from .adaptive import as_policy
from .drafters import as_drafter
from .sampling import check_sampling_args, probs, sample, whole
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
    def bonus(self):  # the kept path reached a leaf of a real draft: the added token is extra
        return bool(self.tree.tokens) and not self.tree.children(self.path[-1] if self.path else -1)


@dataclass
class Stats:
    tokens_per_call: float    # new tokens per target call (the survey's efficiency measure)
    kept_fraction: float      # drafted tokens kept / drafted tokens (tree nodes count)
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


def finish(prompt, context, steps, max_new_tokens, eos_token, t0, draft_calls=0):
    """Cut the new tokens at max_new_tokens and right after the first eos_token; the stats."""
    tokens = context[len(prompt):][:max_new_tokens]
    if eos_token is not None and eos_token in tokens:
        tokens = tokens[:tokens.index(eos_token) + 1]
    wall, calls = time.perf_counter() - t0, len(steps) or len(tokens)
    drafted = sum(len(s.tree.tokens) for s in steps)
    kept = sum(s.accepted for s in steps) / drafted if drafted else 0.0
    stats = Stats(len(tokens) / calls, kept, calls, draft_calls, drafted, wall, len(tokens) / wall)
    return Result(tokens, steps, stats)


def tokens_left(prompt, context, max_new_tokens, eos_token):
    """How many more tokens are wanted: 0 once there are max_new_tokens new ones or eos_token."""
    new = context[len(prompt):]
    return 0 if eos_token in new else max_new_tokens - len(new)


def is_batch(ids):
    """A list of prompts (each a list or a 1-d tensor), or a (B, T) tensor with B > 1."""
    if torch.is_tensor(ids):
        return ids.dim() == 2 and len(ids) > 1
    first = ids[0] if isinstance(ids, (list, tuple)) and ids else None
    return isinstance(first, (list, tuple)) or torch.is_tensor(first) and first.dim() > 0


def check_args(model, max_new_tokens, temperature, top_k, top_p, eos_token):
    """The decoding options -> max_new_tokens as an int, or a ValueError naming the bad one."""
    check_sampling_args(temperature, top_k, top_p)
    V, block = model.config.vocab_size, model.config.block_size
    max_new_tokens = whole(max_new_tokens, "max_new_tokens")
    if max_new_tokens >= block:
        raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in "
                         f"block_size={block}")
    if eos_token is not None and whole(eos_token, "eos_token", 0) >= V:
        raise ValueError(f"eos_token must be a token id in [0, {V}) or None, got {eos_token}")
    return max_new_tokens


def check_prompt(model, ids, max_new_tokens, crop_prompt):
    """One prompt -> a list of ints (its end only, if crop_prompt and too long)."""
    V, block = model.config.vocab_size, model.config.block_size
    if isinstance(ids, str):
        raise ValueError("ids must be token ids, not text: use minispec.encode(text)")
    p = [int(i) for i in (ids.flatten().tolist() if torch.is_tensor(ids) else ids)]
    if not p:
        raise ValueError("the prompt is empty: give at least one token id")
    if not all(0 <= i < V for i in p):
        raise ValueError(f"the prompt has ids outside [0, {V}): give token ids in that range")
    if len(p) + max_new_tokens > block and not crop_prompt:
        raise ValueError(f"prompt ({len(p)} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"block_size={block}; shorten it or pass crop_prompt=True to keep its end")
    return p[max(len(p) + max_new_tokens - block, 0):]  # crop_prompt: keep the end that fits


@torch.inference_mode()
def generate(model, ids, max_new_tokens=64, temperature=0.0, top_k=None, top_p=None, seed=0,
             eos_token=None, crop_prompt=False):
    """Plain autoregressive decoding with a KV cache: one target call per token.

    ids: a prompt, or a list of prompts of any lengths (a list of Results comes back).
    Example: generate(load_model("target"), encode("def "), 16).tokens
    """
    if is_batch(ids):
        from .batch.loop import generate_batch
        return generate_batch(model, ids, max_new_tokens, temperature, top_k, top_p, seed,
                              eos_token, crop_prompt)
    max_new_tokens = check_args(model, max_new_tokens, temperature, top_k, top_p, eos_token)
    prompt = check_prompt(model, ids, max_new_tokens, crop_prompt)
    g, cache, t0 = torch.Generator().manual_seed(seed), model.new_cache(), time.perf_counter()
    context, dev = list(prompt), model.wte.weight.device
    while tokens_left(prompt, context, max_new_tokens, eos_token) > 0:
        logits = model(torch.tensor([context[cache.length:]], device=dev), cache)  # (1, T, V)
        p = probs(logits[0, -1], temperature, top_k, top_p).cpu()  # (V,)
        context.append(sample(p, g) if temperature > 0 else int(p.argmax()))
    return finish(prompt, context, [], max_new_tokens, eos_token, t0)


@torch.inference_mode()
def speculative_generate(target, drafter, ids, max_new_tokens=64, gamma=4, temperature=0.0,
                         top_k=None, top_p=None, seed=0, eos_token=None, crop_prompt=False,
                         rule=multi_draft_accept):
    """`drafter` (a GPT, or any Drafter, e.g. load_drafter("hydra", target)) drafts, `target`
    verifies.

    ids: a prompt, or a list of prompts (minispec.batch.loop: the drafters that batch).
    gamma: drafted tokens the target scores per call (chain length, or tree nodes); an int, or a
        draft-length policy from minispec.adaptive (e.g. Heuristic(4)).
    temperature 0: output identical to generate(target, ...). temperature > 0: lossless,
        distributed exactly as generate's. rule: the per-node sampling rule (typical_accept is
        lossy). In float32 a forward over many tokens may round differently from one over a
        single token, so a near-tie between two argmaxes could break the other way: the
        exactness tests also run in float64.
    """
    if is_batch(ids):
        from .batch.loop import speculative_generate_batch
        return speculative_generate_batch(target, drafter, ids, max_new_tokens, gamma,
                                          temperature, top_k, top_p, seed, eos_token,
                                          crop_prompt, rule)
    policy, drafter = as_policy(gamma), as_drafter(drafter, target)
    max_new_tokens = check_args(target, max_new_tokens, temperature, top_k, top_p, eos_token)
    prompt = check_prompt(target, ids, max_new_tokens, crop_prompt)
    g = torch.Generator().manual_seed(seed)
    cache = target.new_cache(size=2 * target.config.block_size)  # room for a tree after the context
    drafter.reset(target, cache)
    policy.reset()
    context, steps, calls, t0 = list(prompt), [], drafter.calls, time.perf_counter()
    while (left := tokens_left(prompt, context, max_new_tokens, eos_token)) > 0:
        # 1. draft: at most gamma tokens, none deeper than the tokens wanted besides the target's
        tree = drafter.draft(context, policy.gamma, temperature, top_k, top_p, g, depth=left - 1)
        # 2. one target call: p at the root (row -N-1) and after each of the N nodes
        hidden, logits = drafter.score(target, cache, context, tree)  # (T, C), (T, V)
        p = probs(logits[-len(tree.tokens) - 1:], temperature, top_k, top_p).cpu()  # (1 + N, V)
        # 3. verify: the kept path of nodes, and the target's own token after it
        path, token = verify_tree(tree, p, temperature, g, rule)
        # 4. roll back: the cache keeps the context and the kept path, in order; tell the drafter
        cache.keep(len(context), path)
        drafter.accept(context, tree, path, hidden, logits)
        context += [tree.tokens[i] for i in path] + [token]
        steps.append(Step(tree, path, token))
        policy.update(steps[-1])
    return finish(prompt, context, steps, max_new_tokens, eos_token, t0, drafter.calls - calls)
