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

import torch

from .adaptive import as_policy
from .drafters import as_drafter
from .rounds import Step, check_args, check_prompt, finish, tokens_left
from .sampling import probs, sample, whole
from .verify import multi_draft_accept, verify_tree


@torch.inference_mode()
def generate(model, ids, max_new_tokens=64, temperature=0.0, top_k=None, top_p=None, seed=0,
             eos_token=None, crop_prompt=False):
    """Plain autoregressive decoding with a KV cache: one target call per token.

    ids: a prompt, or a list of prompts of any lengths (a list of Results comes back).
    Example: generate(load_model("target"), encode("def "), 16).tokens
    """
    from .batch.loop import generate_batch, is_batch  # batching is its own lesson (and package)
    if is_batch(ids):
        return generate_batch(model, ids, max_new_tokens, temperature, top_k, top_p, seed,
                              eos_token, crop_prompt)
    max_new_tokens = check_args(model, max_new_tokens, temperature, top_k, top_p, eos_token, seed)
    prompt = check_prompt(model, ids, max_new_tokens, crop_prompt)
    g = torch.Generator().manual_seed(int(seed))
    cache = model.new_cache()
    context = list(prompt)
    dev = model.wte.weight.device
    t0 = time.perf_counter()
    while tokens_left(prompt, context, max_new_tokens, eos_token) > 0:
        logits = model(torch.tensor([context[cache.length:]], device=dev), cache)  # (1, T, V)
        p = probs(logits[0, -1], temperature, top_k, top_p).cpu()  # (V,)
        context.append(sample(p, g) if temperature > 0 else int(p.argmax()))
    return finish(prompt, context, [], max_new_tokens, eos_token, t0)


@torch.inference_mode()
def speculative_generate(target, drafter, ids, max_new_tokens=64, gamma=4, temperature=0.0,
                         top_k=None, top_p=None, seed=0, eos_token=None, crop_prompt=False,
                         rule=multi_draft_accept):
    """`drafter` (a GPT, or any Drafter: load_drafter(name, target)) drafts, `target` verifies.

    ids: a prompt, or a list of prompts (minispec.batch.loop: the drafters that batch).
    gamma: drafted tokens the target scores per call (chain length, or tree nodes: at most
        block_size); an int, or a draft-length policy from minispec.adaptive (e.g. Heuristic(4)).
    temperature 0: output identical to generate(target, ...). temperature > 0: lossless,
        distributed exactly as generate's. rule: the per-node sampling rule (typical_accept is
        lossy). In float32 a forward over many tokens may round differently from one over a
        single token, so a near-tie between two argmaxes could break the other way: the
        exactness tests also run in float64.
    """
    from .batch.loop import is_batch, speculative_generate_batch
    if is_batch(ids):
        return speculative_generate_batch(target, drafter, ids, max_new_tokens, gamma,
                                          temperature, top_k, top_p, seed, eos_token,
                                          crop_prompt, rule)
    max_new_tokens = check_args(target, max_new_tokens, temperature, top_k, top_p, eos_token, seed)
    policy, drafter = as_policy(gamma), as_drafter(drafter, target)
    prompt = check_prompt(target, ids, max_new_tokens, crop_prompt)
    g = torch.Generator().manual_seed(int(seed))
    cache = target.new_cache(size=2 * target.config.block_size)  # room for a tree after the context
    drafter.reset(target, cache)
    policy.reset()
    context = list(prompt)
    steps = []
    calls = drafter.calls  # the drafter's forward passes before this prompt
    t0 = time.perf_counter()
    while (left := tokens_left(prompt, context, max_new_tokens, eos_token)) > 0:
        # 1. draft on a copy (a drafter's append must not enter the output): at most gamma tokens,
        k = min(whole(policy.gamma, "the policy's gamma"), target.config.block_size)  # block_size
        tree = drafter.draft(list(context), k, temperature, top_k, top_p, g, depth=left - 1)
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
