"""Notebook 12, exercise "where the cache outweighs the weights": a reference solution, the classic
wrong answer and more wrong answers the check must reject."""


def solution(n_params, n_layer, n_kv_head, head_size, batch=1):
    """b P = b * 2 L H_kv d_h * n B  =>  n = P / (2 L H_kv d_h B); the bytes a number cancel."""
    return n_params / (2 * n_layer * n_kv_head * head_size * batch)


def wrong(n_params, n_layer, n_kv_head, head_size, batch=1):
    """The classic mistake: keys only (the cache holds values too)."""
    return n_params / (n_layer * n_kv_head * head_size * batch)


def no_batch(n_params, n_layer, n_kv_head, head_size, batch=1):
    """Wrong: one row's cache, whatever the batch (each row keeps its own keys and values)."""
    return n_params / (2 * n_layer * n_kv_head * head_size)


def all_heads(n_params, n_layer, n_kv_head, head_size, batch=1):
    """Wrong: as if every query head kept its own keys (no grouped-query attention: 3x the
    cache)."""
    return n_params / (2 * n_layer * 3 * n_kv_head * head_size * batch)


more_wrong = [no_batch, all_heads]
