"""Notebook 03, exercise "when alpha changes along the round": a reference solution and two wrong
answers."""


def solution(alphas):
    """E[tokens per target call] when draft i is kept with probability alphas[i] given that drafts
    0..i-1 were: the target's own token, plus draft k for every k whose whole prefix was kept:
    1 + a1 + a1 a2 + ... + a1...ag."""
    total, reach = 1.0, 1.0
    for a in alphas:
        reach *= a          # P(drafts 1..k all kept)
        total += reach
    return total


def wrong(alphas):
    """The classic mistake: the mean alpha plugged into the closed form (1 - a^(g+1)) / (1 - a)."""
    g = len(alphas)
    if g == 0:
        return 1.0
    a = sum(alphas) / g
    return g + 1.0 if a >= 1 else (1 - a ** (g + 1)) / (1 - a)


def reversed_order(alphas):
    """Wrong: Horner's rule run forwards, 1 + a_g (1 + a_(g-1) (...)): the products of the LAST
    alphas."""
    total = 1.0
    for a in alphas:
        total = 1 + a * total
    return total


# found by a review: the check must reject these too (tests/test_exercises.py)
more_wrong = [reversed_order]
