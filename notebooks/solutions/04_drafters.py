"""Notebook 04, exercise "a bigram drafter": a reference solution and a classic wrong answer."""


def solution(context, gamma):
    """Propose, after the last token, its most frequent follower in the context (ties: the most recent one),
    then the same from the proposed token, up to gamma tokens; stop when the last token has no follower."""
    followers = {}
    for a, b in zip(context, context[1:]):
        followers.setdefault(a, []).append(b)
    out, last = [], context[-1]
    while len(out) < gamma and last in followers:
        seen = followers[last]
        last = max(reversed(seen), key=seen.count)  # max keeps the first of equal counts: the most recent
        out.append(last)
    return out


def wrong(context, gamma):
    """The classic mistake: the most recent follower instead of the most frequent (prompt lookup with n = 1)."""
    out, last = [], context[-1]
    while len(out) < gamma:
        earlier = [i for i in range(len(context) - 1) if context[i] == last]
        if not earlier:
            break
        last = context[earlier[-1] + 1]
        out.append(last)
    return out
