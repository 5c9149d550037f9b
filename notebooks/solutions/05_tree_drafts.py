"""Notebook 05, exercise "the best static tree": a reference solution, a classic wrong answer and
more wrong answers the check must reject."""
import heapq
import itertools
import math


def solution(rank_probs, budget):
    """The `budget` rank paths with the largest acceptance probability prod(rank_probs[r] for r in
    path), best first: a child is never more probable than its parent, so the best paths always
    include their prefixes."""
    frontier = [(-a, (r,)) for r, a in enumerate(rank_probs)]
    heapq.heapify(frontier)
    paths = []
    while len(paths) < budget:
        value, path = heapq.heappop(frontier)
        paths.append(path)
        for r, a in enumerate(rank_probs):
            heapq.heappush(frontier, (value * a, path + (r,)))
    return paths


def wrong(rank_probs, budget):
    """The classic mistake: a chain of top choices, (0,), (0, 0), (0, 0, 0), ...: it ignores the
    other ranks."""
    return [(0,) * d for d in range(1, budget + 1)]


def depth_capped(rank_probs, budget, max_depth=3):
    """Wrong: every rank path up to depth 3, the most probable first: it misses deeper paths that
    pay."""
    paths = [p for d in range(1, max_depth + 1) for p in itertools.product(range(len(rank_probs)),
                                                                            repeat=d)]
    paths.sort(key=lambda p: -math.prod(rank_probs[r] for r in p))
    return paths[:budget]


def extend_last(rank_probs, budget):
    """Wrong: each new node is the best child or sibling of the node added last (a greedy walk, not
    the best among all the children of the tree so far)."""
    paths = [(0,)]
    while len(paths) < budget:
        last = paths[-1]
        options = [last + (r,) for r in range(len(rank_probs))]
        options += [last[:-1] + (r,) for r in range(len(rank_probs))]
        options = [p for p in options if p not in paths]
        paths.append(max(options, key=lambda p: math.prod(rank_probs[r] for r in p)))
    return paths


def sorted_siblings(rank_probs, budget):
    """Wrong: assumes rank_probs decreases (a node's next sibling is always its best one), so it
    misses a more probable rank further along."""
    frontier, paths = [(-rank_probs[0], (0,))], []
    while len(paths) < budget:
        value, path = heapq.heappop(frontier)
        paths.append(path)
        heapq.heappush(frontier, (value * rank_probs[0], path + (0,)))
        r = path[-1] + 1
        if r < len(rank_probs):
            sibling = value / rank_probs[path[-1]] * rank_probs[r]
            heapq.heappush(frontier, (sibling, path[:-1] + (r,)))
    return paths


more_wrong = [depth_capped, extend_last, sorted_siblings]  # a review's (tests/test_exercises.py)
