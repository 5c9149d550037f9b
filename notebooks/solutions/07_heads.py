"""Notebook 07, exercise "what a static tree is worth": a reference solution and wrong answers."""
import math


def solution(accuracy, paths):
    """E[kept] = sum over the tree's nodes (every prefix of every rank path, once) of the product of
    the accuracies along the node's path: the chance that it and every node above it are right."""
    nodes = {tuple(p[:d]) for p in paths for d in range(1, len(p) + 1)}
    return float(sum(math.prod(accuracy[i][r] for i, r in enumerate(n)) for n in nodes))


def wrong(accuracy, paths):
    """Each node's own accuracy, as if a guess could be kept after a wrong guess above it."""
    nodes = {tuple(p[:d]) for p in paths for d in range(1, len(p) + 1)}
    return float(sum(accuracy[len(n) - 1][n[-1]] for n in nodes))


def paths_only(accuracy, paths):
    """Wrong: only the given paths' ends count, not the prefixes they pass through."""
    return float(sum(math.prod(accuracy[i][r] for i, r in enumerate(p)) for p in paths))


def shared_prefixes_twice(accuracy, paths):
    """Wrong: a prefix shared by several paths is counted once per path."""
    return float(sum(math.prod(accuracy[i][r] for i, r in enumerate(p[:d]))
                     for p in paths for d in range(1, len(p) + 1)))


more_wrong = [paths_only, shared_prefixes_twice]  # tests/test_exercises.py: rejected too
