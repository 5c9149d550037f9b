"""Notebook 01's exercises, "predict the rounds" and "the round": reference solutions and classic
wrong answers (tests/test_exercises.py checks that each check rejects every wrong one)."""
import torch

import minispec as ms


def solution(a, gamma, n_tokens):
    """Drafts kept per round, from the agreement vector a (1 where the draft's argmax equals the
    target's)."""
    rounds, t = [], 0
    while t < n_tokens:
        # the last rounds draft fewer: a round adds at most k + 1 tokens
        k = min(gamma, n_tokens - t - 1)
        kept = 0
        while kept < k and a[t + kept]:
            kept += 1
        rounds.append(kept)
        t += kept + 1                      # the kept drafts, then the target's own token
    return rounds


def wrong(a, gamma, n_tokens):
    """The classic mistake: every round drafts gamma tokens, even when fewer are left to
    generate."""
    rounds, t = [], 0
    while t < n_tokens:
        kept = 0
        while kept < gamma and t + kept < len(a) and a[t + kept]:
            kept += 1
        rounds.append(kept)
        t += kept + 1
    return rounds


def count_ones(a, gamma, n_tokens):
    """A review's wrong answer: every 1 in the round's window counts, even after a 0 (a draft
    after a rejected one was never tested)."""
    rounds, t = [], 0
    while t < n_tokens:
        k = min(gamma, n_tokens - t - 1)
        kept = sum(a[t:t + k])
        rounds.append(kept)
        t += kept + 1
    return rounds


more_wrong = [count_ones]


# Exercise "the round": speculative_round(target, draft, context, cache, gamma, generator,
# temperature, top_k, top_p) -> the round's new tokens (the kept drafts, then the target's token).


def solution_round(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
                   top_p=None):
    """Draft gamma tokens, each drawn from the warped q it is recorded with; one target call on
    the tokens the cache has not seen and the drafts; the rule; the cache cropped to the context
    and the kept drafts."""
    drafts, q = [], []
    for _ in range(gamma):
        logits = draft(torch.tensor([context + drafts]))[0, -1]           # (V,)
        q.append(ms.probs(logits, temperature, top_k, top_p))
        drafts.append(ms.sample(q[-1], generator))
    new = context[cache.length:] + drafts
    logits = target(torch.tensor([new]), cache)[0, -gamma - 1:]           # (gamma + 1, V)
    p = ms.probs(logits, temperature, top_k, top_p)
    n, token = ms.speculative_accept(drafts, torch.stack(q), p, generator)
    cache.crop(len(context) + n)
    return drafts[:n] + [token]


def wrong_round(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
                top_p=None):
    """The classic mistake: each draft drawn from the warped q, but the raw softmax recorded."""
    drafts, q = [], []
    for _ in range(gamma):
        logits = draft(torch.tensor([context + drafts]))[0, -1]
        q.append(torch.softmax(logits, -1))
        drafts.append(ms.sample(ms.probs(logits, temperature, top_k, top_p), generator))
    new = context[cache.length:] + drafts
    p = ms.probs(target(torch.tensor([new]), cache)[0, -gamma - 1:], temperature, top_k, top_p)
    n, token = ms.speculative_accept(drafts, torch.stack(q), p, generator)
    cache.crop(len(context) + n)
    return drafts[:n] + [token]


def _drafts(draft, context, gamma, generator, temperature, top_k, top_p):
    """Right drafting (each token drawn from the warped q recorded with it), for the wrong rounds
    below that go wrong elsewhere."""
    drafts, q = [], []
    for _ in range(gamma):
        logits = draft(torch.tensor([context + drafts]))[0, -1]
        q.append(ms.probs(logits, temperature, top_k, top_p))
        drafts.append(ms.sample(q[-1], generator))
    return drafts, torch.stack(q)


def no_rollback(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
                top_p=None):
    """Wrong: the cache keeps the rejected drafts' keys and values (no crop)."""
    drafts, q = _drafts(draft, context, gamma, generator, temperature, top_k, top_p)
    new = context[cache.length:] + drafts
    p = ms.probs(target(torch.tensor([new]), cache)[0, -gamma - 1:], temperature, top_k, top_p)
    n, token = ms.speculative_accept(drafts, q, p, generator)
    return drafts[:n] + [token]


def p_off_by_one(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
                 top_p=None):
    """Wrong: p sliced one row early, (gamma + 1) rows ending at the last draft's, so each draft
    is judged by the distribution before the token it follows."""
    drafts, q = _drafts(draft, context, gamma, generator, temperature, top_k, top_p)
    new = context[cache.length:] + drafts
    logits = target(torch.tensor([new]), cache)[0, -gamma - 2:-1]
    n, token = ms.speculative_accept(drafts, q, ms.probs(logits, temperature, top_k, top_p),
                                     generator)
    cache.crop(len(context) + n)
    return drafts[:n] + [token]


def bonus_wrong_row(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
                    top_p=None):
    """Wrong: the rule written out, with the bonus drawn from p[i], the last draft's row, not from
    the row after every draft."""
    drafts, q = _drafts(draft, context, gamma, generator, temperature, top_k, top_p)
    new = context[cache.length:] + drafts
    p = ms.probs(target(torch.tensor([new]), cache)[0, -gamma - 1:], temperature, top_k, top_p)
    n, token = gamma, None
    for i, x in enumerate(drafts):
        if not torch.rand((), generator=generator) < ms.accept_prob(p[i, x], q[i, x]):
            n, token = i, ms.sample(ms.residual(p[i], q[i]), generator)
            break
    if token is None:
        token = ms.sample(p[i], generator)
    cache.crop(len(context) + n)
    return drafts[:n] + [token]


def raw_p(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
          top_p=None):
    """Wrong: q warped, but the target's p left as the raw softmax (the output follows the target
    at temperature 1, not at the temperature asked for)."""
    drafts, q = _drafts(draft, context, gamma, generator, temperature, top_k, top_p)
    new = context[cache.length:] + drafts
    p = torch.softmax(target(torch.tensor([new]), cache)[0, -gamma - 1:], -1)
    n, token = ms.speculative_accept(drafts, q, p, generator)
    cache.crop(len(context) + n)
    return drafts[:n] + [token]


def greedy_draft_soft_q(target, draft, context, cache, gamma, generator, temperature=1.0,
                        top_k=None, top_p=None):
    """Wrong: the drafts are the draft's argmax, but the soft warped q is recorded as if sampled."""
    drafts, q = [], []
    for _ in range(gamma):
        logits = draft(torch.tensor([context + drafts]))[0, -1]
        q.append(ms.probs(logits, temperature, top_k, top_p))
        drafts.append(int(q[-1].argmax()))
    new = context[cache.length:] + drafts
    p = ms.probs(target(torch.tensor([new]), cache)[0, -gamma - 1:], temperature, top_k, top_p)
    n, token = ms.speculative_accept(drafts, torch.stack(q), p, generator)
    cache.crop(len(context) + n)
    return drafts[:n] + [token]


def no_cache(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
             top_p=None):
    """Wrong: the right law, but the target rereads the whole context every round (its cache is
    never used: the round the exercise asks for costs one call on the new tokens only)."""
    drafts, q = _drafts(draft, context, gamma, generator, temperature, top_k, top_p)
    logits = target(torch.tensor([context + drafts]))[0, -gamma - 1:]
    n, token = ms.speculative_accept(drafts, q, ms.probs(logits, temperature, top_k, top_p),
                                     generator)
    return drafts[:n] + [token]


def no_bonus(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
             top_p=None):
    """Wrong (found by an audit): after a round that keeps every draft, the target's bonus token is
    dropped (and the cache cropped to match). The law stays the target's; every full round loses a
    token, so the loop makes more target calls than it needs."""
    drafts, q = _drafts(draft, context, gamma, generator, temperature, top_k, top_p)
    new = context[cache.length:] + drafts
    p = ms.probs(target(torch.tensor([new]), cache)[0, -gamma - 1:], temperature, top_k, top_p)
    n, token = ms.speculative_accept(drafts, q, p, generator)
    if n == gamma:
        cache.crop(len(context) + n - 1)
        return drafts
    cache.crop(len(context) + n)
    return drafts[:n] + [token]


def no_top_p(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
             top_p=None):
    """Wrong (found by an audit): top_p ignored, for p and q alike (the law of top-p sampling is
    not the law of plain sampling)."""
    return solution_round(target, draft, context, cache, gamma, generator, temperature, top_k)


def global_rng(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
               top_p=None):
    """Wrong (found by an audit): the right law, but drawn from torch's global generator, so the
    same seed does not give the same tokens."""
    return solution_round(target, draft, context, cache, gamma, None, temperature, top_k, top_p)


def reject_all_sampled(target, draft, context, cache, gamma, generator, temperature=1.0,
                       top_k=None, top_p=None):
    """Wrong (found by a review): right at temperature 0, but at T > 0 it keeps no draft: one
    target call, the cache cropped to the context, one token from p at the root. Its law is the
    target's (a round that rejects everything is trivially lossless), its rounds one token each."""
    if temperature == 0:
        return solution_round(target, draft, context, cache, gamma, generator, temperature, top_k,
                              top_p)
    new = context[cache.length:] + [0] * gamma
    p = ms.probs(target(torch.tensor([new]), cache)[0, -gamma - 1], temperature, top_k, top_p)
    cache.crop(len(context))
    return [ms.sample(p, generator)]


def no_bonus_sampled(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
                     top_p=None):
    """Wrong (found by a review): no_bonus, but only at T > 0, where the greedy check cannot see
    it."""
    round_fn = solution_round if temperature == 0 else no_bonus
    return round_fn(target, draft, context, cache, gamma, generator, temperature, top_k, top_p)


def reseeded(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
             top_p=None):
    """Wrong: torch's global generator seeded inside the round, then drawn from (generator None):
    every round draws the same coins (found by a red team of the checks)."""
    torch.manual_seed(0)
    return solution_round(target, draft, context, cache, gamma, None, temperature, top_k, top_p)


def own_generator(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
                  top_p=None):
    """Wrong the same way: a fresh generator of its own each round, `generator` ignored."""
    g = torch.Generator().manual_seed(0)
    return solution_round(target, draft, context, cache, gamma, g, temperature, top_k, top_p)


def rereads_context(target, draft, context, cache, gamma, generator, temperature=1.0, top_k=None,
                    top_p=None):
    """Wrong: one target call a round, but on the whole context again (the cache emptied first):
    no_cache's cost in the round's one call."""
    drafts, q = _drafts(draft, context, gamma, generator, temperature, top_k, top_p)
    cache.crop(0)
    logits = target(torch.tensor([context + drafts]), cache)[0, -gamma - 1:]
    p = ms.probs(logits, temperature, top_k, top_p)
    n, token = ms.speculative_accept(drafts, q, p, generator)
    cache.crop(len(context) + n)
    return drafts[:n] + [token]


more_wrong_round = [no_rollback, p_off_by_one, bonus_wrong_row, raw_p, greedy_draft_soft_q,
                    no_cache, no_bonus, no_top_p, global_rng, reject_all_sampled, no_bonus_sampled,
                    reseeded, own_generator, rereads_context]
