"""Notebook 05, exercise "the best static tree": a reference solution and a classic wrong answer."""
import heapq


def solution(rank_probs, budget):
    """The `budget` rank paths with the largest acceptance probability prod(rank_probs[r] for r in path), best
    first: a child is never more probable than its parent, so the best paths always include their prefixes."""
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
    """The classic mistake: a chain of top choices, (0,), (0, 0), (0, 0, 0), ...: it ignores the other ranks."""
    return [(0,) * d for d in range(1, budget + 1)]
