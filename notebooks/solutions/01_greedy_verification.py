"""Notebook 01, exercise "predict the rounds": a reference solution and a classic wrong answer."""


def solution(a, gamma, n_tokens):
    """Drafts kept per round, from the agreement vector a (1 where the draft's argmax equals the target's)."""
    rounds, t = [], 0
    while t < n_tokens:
        k = min(gamma, n_tokens - t - 1)   # the last rounds draft fewer: a round adds at most k + 1 tokens
        kept = 0
        while kept < k and a[t + kept]:
            kept += 1
        rounds.append(kept)
        t += kept + 1                      # the kept drafts, then the target's own token
    return rounds


def wrong(a, gamma, n_tokens):
    """The classic mistake: every round drafts gamma tokens, even when fewer are left to generate."""
    rounds, t = [], 0
    while t < n_tokens:
        kept = 0
        while kept < gamma and t + kept < len(a) and a[t + kept]:
            kept += 1
        rounds.append(kept)
        t += kept + 1
    return rounds
