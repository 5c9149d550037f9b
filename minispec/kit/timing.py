"""Timing on this machine: what one cached forward pass costs (c and v are ratios of these).
"""
import statistics
import time

import torch


@torch.inference_mode()
def step_cost(model, k, context=128, reps=60, batch_size=1):
    """Median seconds of one cached forward over k new tokens after `context` cached ones, for
    batch_size rows (the first 5 calls are warm-up)."""
    cache, times, dev = model.new_cache(batch_size), [], model.wte.weight.device
    if context:
        model(torch.zeros(batch_size, context, dtype=torch.long, device=dev), cache)
    x = torch.zeros(batch_size, k, dtype=torch.long, device=dev)
    for _ in range(reps):
        t = time.perf_counter()
        model(x, cache)[:, -1, 0].tolist()  # .tolist() waits for the device (a GPU runs ahead)
        times.append(time.perf_counter() - t)
        cache.crop(context)
    return statistics.median(times[5:])
