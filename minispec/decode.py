"""Autoregressive decoding (the baseline) and speculative decoding (draft, verify, accept, roll back).

One round of speculative decoding (Leviathan et al. 2023, Alg. 1; survey Alg. 1):
  1. the drafter proposes gamma tokens x_1..x_gamma, each with the q it was drawn from;
  2. the target scores context + x_1..x_gamma in ONE forward pass, giving p_1..p_{gamma+1};
  3. a verification rule keeps the first n drafts and adds one token of the target's own
     (a correction if n < gamma, a bonus if n == gamma);
  4. both KV caches are cropped back to the committed prefix.
Every round costs one target call and yields between 1 and gamma + 1 tokens.
"""
import time
from dataclasses import dataclass, field

import torch

from .adaptive import as_policy
from .drafters import as_drafter
from .sampling import check_sampling_args, probs, sample
from .verify import greedy_accept, speculative_accept


@dataclass
class Step:
    """One target call: what was drafted, how many were kept, the token the target added."""
    drafted: list
    accepted: int
    token: int
    accept_probs: list = field(default_factory=list)  # min(1, p/q) of each drafted token

    @property
    def bonus(self):  # all drafts kept: the added token is a free extra
        return self.accepted == len(self.drafted)


@dataclass
class Result:
    tokens: list   # the new tokens only
    steps: list    # one Step per target call (empty for plain generate)
    stats: dict


def _prepare(model, ids, max_new_tokens, temperature, top_k, top_p, crop_prompt):
    check_sampling_args(temperature, top_k, top_p)
    if isinstance(ids, str):
        raise ValueError("ids must be token ids, not text: use minispec.encode(text)")
    ids = [int(i) for i in (ids.flatten().tolist() if torch.is_tensor(ids) else ids)]
    V, block = model.config.vocab_size, model.config.block_size
    if not ids:
        raise ValueError("the prompt is empty: give at least one token")
    if not all(0 <= i < V for i in ids):
        raise ValueError(f"prompt token ids must lie in [0, {V})")
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


def _stop(tokens, max_new_tokens, eos_token):
    """Cut at max_new_tokens, and right after the first eos_token."""
    tokens = tokens[:max_new_tokens]
    if eos_token is not None and eos_token in tokens:
        tokens = tokens[:tokens.index(eos_token) + 1]
    return tokens


@torch.inference_mode()
def generate(model, ids, max_new_tokens=64, temperature=0.0, top_k=None, top_p=None, seed=0,
             eos_token=None, crop_prompt=False):
    """Plain autoregressive decoding with a KV cache: one target call per token.

    Example: generate(load_model("target"), encode("def "), 16).tokens
    """
    ids = _prepare(model, ids, max_new_tokens, temperature, top_k, top_p, crop_prompt)
    g = torch.Generator().manual_seed(seed)
    cache, t0, tokens = model.new_cache(), time.perf_counter(), []
    new = ids
    while len(tokens) < max_new_tokens and (eos_token is None or eos_token not in tokens):
        p = probs(model(torch.tensor([new]), cache)[0, -1], temperature, top_k, top_p)  # (V,)
        tokens.append(sample(p, g) if temperature > 0 else int(p.argmax()))
        new = tokens[-1:]
    wall = time.perf_counter() - t0
    stats = dict(target_calls=len(tokens), draft_calls=0, tokens_per_call=1.0, wall_time=wall,
                 tokens_per_second=len(tokens) / wall)
    return Result(tokens, [], stats)


@torch.inference_mode()
def speculative_generate(target, draft, ids, max_new_tokens=64, gamma=4, temperature=0.0, top_k=None,
                         top_p=None, seed=0, eos_token=None, crop_prompt=False):
    """Speculative decoding: `draft` (a GPT or any Drafter) proposes, `target` verifies.

    temperature 0: greedy verification, output identical to generate(target, ...).
    temperature > 0: lossless rejection sampling, output distributed exactly as generate's.
    gamma: an int, or a draft-length policy from minispec.adaptive (e.g. Heuristic(4)).
    """
    policy = as_policy(gamma)  # an int gamma < 1 raises ValueError here
    draft = as_drafter(draft, target)
    ids = _prepare(target, ids, max_new_tokens, temperature, top_k, top_p, crop_prompt)
    g = torch.Generator().manual_seed(seed)
    draft.reset()
    policy.reset()
    calls0 = getattr(draft, "calls", 0)
    cache, context, steps, t0 = target.new_cache(), list(ids), [], time.perf_counter()
    produced = lambda: len(context) - len(ids)
    while produced() < max_new_tokens and (eos_token is None or eos_token not in context[len(ids):]):
        k = min(policy.gamma, max_new_tokens - produced() - 1)  # the round adds up to k + 1 tokens
        no_draft = ([], torch.zeros(0, target.config.vocab_size))  # the last token: nothing to draft
        drafted, q = draft.propose(context, k, temperature, top_k, top_p, g) if k > 0 else no_draft
        drafted = drafted[:k]
        # one target call over the uncached context and every drafted token: p_1..p_{n+1}
        logits = target(torch.tensor([context[cache.length:] + drafted]), cache)[0]  # (T, V)
        p = probs(logits[-len(drafted) - 1:], temperature, top_k, top_p)  # (n + 1, V)
        if temperature == 0:
            n, tok = greedy_accept(drafted, p)
            ratios = [float(p[i, x]) for i, x in enumerate(drafted)]
        else:
            q = q[:len(drafted)]
            n, tok = speculative_accept(drafted, q, p, g)
            ratios = [min(1.0, float(p[i, x] / q[i, x])) for i, x in enumerate(drafted)]
        committed = len(context) + n  # context + kept drafts are in both caches and valid
        context += drafted[:n] + [tok]
        cache.crop(committed)
        draft.rollback(committed)
        steps.append(Step(drafted, n, tok, ratios))
        policy.update(steps[-1])
    wall = time.perf_counter() - t0
    tokens = _stop(context[len(ids):], max_new_tokens, eos_token)
    drafted = sum(len(s.drafted) for s in steps)
    stats = dict(acceptance_rate=sum(s.accepted for s in steps) / drafted if drafted else 0.0,
                 tokens_per_call=len(tokens) / len(steps), target_calls=len(steps),
                 draft_calls=getattr(draft, "calls", 0) - calls0, drafted=drafted, wall_time=wall,
                 tokens_per_second=len(tokens) / wall)
    return Result(tokens, steps, stats)
