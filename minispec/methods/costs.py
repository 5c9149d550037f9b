"""What one forward costs on this machine: the cost profile the speedup formulas read (notebook
03), c = t(draft) / t(target) and v(k) = t(k tokens) / t(1 token), every call timed in turn so that
a slow spell of the machine lands on all alike. Re-exported by `kit.timing`, where it began, and
`kit.costs`; it lives among the methods because one of them prices itself with it (`priced`), and
the methods cannot import the kit, which imports the loops."""
import statistics
import time

import torch

from ..sampling import whole


def step_cost(model, k, context=128, reps=60, batch_size=1):
    """Median seconds of one cached forward over k new tokens after `context` cached ones, for
    batch_size rows: `step_costs` for one k, `reps` calls of which the first 5 are warm-up."""
    if whole(reps, "reps") <= 5:
        raise ValueError(f"reps must be > 5 (the first 5 calls are warm-up), got {reps}")
    return step_costs(model, [k], context, reps - 5, batch_size, warmup=5)[whole(k, "k")]


def step_costs(model, ks, context=128, reps=25, batch_size=1, warmup=1):
    """{k: median seconds of one cached forward over k new tokens after `context` cached ones}
    for every k in ks (one number: that k): `call_costs` with one call per k, so v(k) = t(k) / t(1)
    is read from calls timed in turn."""
    one = getattr(ks, "ndim", 1) == 0 or not hasattr(ks, "__iter__")  # 4, tensor(4): that k
    ks = dict.fromkeys(whole(k, "k") for k in ([ks] if one else ks))  # each k once
    return call_costs({k: (model, k, context) for k in ks}, reps, batch_size, warmup)


@torch.inference_mode()
def call_costs(calls, reps=25, batch_size=1, warmup=1):
    """{name: median seconds of one cached forward} for calls = {name: (model, k, context)}: k new
    tokens after `context` cached ones, batch_size rows, every call timed in turn (a, b, c, a, b,
    c, ...: a slow spell of the machine lands on every call alike, where one call at a time lets it
    land on one and bend a ratio such as v(k) = t(k) / t(1) or c = t(draft) / t(target)).
    `warmup` sweeps, then `reps` timed ones; calls on one model after one context share a cache."""
    reps, warmup = whole(reps, "reps"), whole(warmup, "warmup", low=0)
    batch_size = whole(batch_size, "batch_size")  # 0 timed an empty forward
    if not (isinstance(calls, dict) and calls):  # a list: an AttributeError before
        raise ValueError(f"call_costs needs at least one call to time, a dict {{name: (model, k, "
                         f"context)}}: got {calls!r:.60}")
    calls = {name: (model, whole(k, "k"), whole(context, "context", low=0))
             for name, (model, k, context) in calls.items()}
    for name, (model, k, context) in calls.items():  # all checked before any forward runs
        if not hasattr(model, "new_cache"):  # None, a name ("target") not loaded yet
            raise ValueError(f"call {name!r}: model must be a GPT or a Llama, got {model!r:.40}")
        if context + k > model.config.block_size:
            raise ValueError(f"call {name!r}: context {context} + k {k} exceeds the model's "
                             f"block_size={model.config.block_size}")
    caches = {}
    for model, k, context in calls.values():
        if (model, context) not in caches:
            cache = caches[model, context] = model.new_cache(batch_size)
            if context:
                model(torch.zeros(batch_size, context, dtype=torch.long,
                                  device=model.wte.weight.device), cache)
    times = {name: [] for name in calls}
    for _ in range(warmup + reps):
        for name, (model, k, context) in calls.items():
            x = torch.zeros(batch_size, k, dtype=torch.long, device=model.wte.weight.device)
            cache = caches[model, context]
            t = time.perf_counter()
            model(x, cache)[:, -1, 0].tolist()  # .tolist() waits for the device (a GPU runs ahead)
            times[name].append(time.perf_counter() - t)
            cache.crop(context)
    return {name: statistics.median(ts[warmup:]) for name, ts in times.items()}
