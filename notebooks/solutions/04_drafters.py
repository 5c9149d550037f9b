"""Notebook 04, exercise "a bigram drafter": a reference solution and a classic wrong answer."""


def solution(context, gamma):
    """Propose, after the last token, its most frequent follower in the context (ties: the most
    recent one), then the same from the proposed token, up to gamma tokens; stop when the last token
    has no follower."""
    followers = {}
    for a, b in zip(context, context[1:]):
        followers.setdefault(a, []).append(b)
    out, last = [], context[-1]
    while len(out) < gamma and last in followers:
        seen = followers[last]
        last = max(reversed(seen), key=seen.count)  # the first of equal counts: the most recent
        out.append(last)
    return out


def wrong(context, gamma):
    """The classic mistake: the most recent follower instead of the most frequent (prompt lookup
    with n = 1)."""
    out, last = [], context[-1]
    while len(out) < gamma:
        earlier = [i for i in range(len(context) - 1) if context[i] == last]
        if not earlier:
            break
        last = context[earlier[-1] + 1]
        out.append(last)
    return out


def tie_largest_id(context, gamma):
    """Wrong: ties between equally frequent followers go to the largest token id, not the most
    recent."""
    out, last = [], context[-1]
    while len(out) < gamma:
        seen = [b for a, b in zip(context, context[1:]) if a == last]
        if not seen:
            break
        last = max(seen, key=lambda t: (seen.count(t), t))
        out.append(last)
    return out


def frequent_first_only(context, gamma):
    """Wrong: the most frequent follower for the first token only, then the most recent follower."""
    seen = [b for a, b in zip(context, context[1:]) if a == context[-1]]
    out = [max(reversed(seen), key=seen.count)] if seen and gamma > 0 else []
    while out and len(out) < gamma:
        earlier = [i for i in range(len(context) - 1) if context[i] == out[-1]]
        if not earlier:
            break
        out.append(context[earlier[-1] + 1])
    return out


def tie_last_seen(context, gamma):
    """Wrong: ties go to the follower seen last anywhere in the context, not to the one that
    followed the current token most recently."""
    out, last = [], context[-1]
    while len(out) < gamma:
        seen = [b for a, b in zip(context, context[1:]) if a == last]
        if not seen:
            break
        last_seen = {t: max(i for i, c in enumerate(context) if c == t) for t in seen}
        last = max(seen, key=lambda t: (seen.count(t), last_seen[t]))
        out.append(last)
    return out


def recent_window(context, gamma):
    """Wrong: the counts over the last 64 tokens only (a match far back is lost)."""
    return solution(context[-64:], gamma)


more_wrong = [tie_largest_id, frequent_first_only, tie_last_seen, recent_window]  # reviews
# (tests/test_exercises.py)
