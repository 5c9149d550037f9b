"""Notebook 11, exercise "the positions of a tree's nodes": a reference solution, the classic wrong
answer and more wrong answers the check must reject."""


def solution(parents, n):
    """A node at depth d (a child of the root has depth 1) sits at position n - 1 + d, whatever its
    branch: siblings share a position."""
    depth = []
    for par in parents:
        depth.append(1 if par < 0 else depth[par] + 1)
    return [n - 1 + d for d in depth]


def wrong(parents, n):
    """The classic mistake: a node's index in the tree (its cache entry) taken as its position."""
    return [n + i for i in range(len(parents))]


def one_too_far(parents, n):
    """Wrong: position n + d, one past where the node's token goes."""
    return [p + 1 for p in solution(parents, n)]


def depth_only(parents, n):
    """Wrong: the depth alone, as if there were no context."""
    return [p - (n - 1) for p in solution(parents, n)]


more_wrong = [one_too_far, depth_only]
