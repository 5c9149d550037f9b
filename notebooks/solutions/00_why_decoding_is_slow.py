"""Notebook 00, exercise "decode without a cache": a reference solution and a classic wrong
answer."""
import torch

from minispec.model import KVCache


def solution(model, ids, max_new_tokens):
    """Greedy decoding with no KV cache: rerun the model on the whole sequence at every step."""
    seq = list(ids)
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            logits = model(torch.tensor([seq]))[0, -1]  # (V,) the last position predicts the next
            seq.append(int(logits.argmax()))
    return seq[len(ids):]


def wrong(model, ids, max_new_tokens):
    """The classic mistake: the argmax of the FIRST position's logits (the prediction after
    ids[0])."""
    seq = list(ids)
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            seq.append(int(model(torch.tensor([seq]))[0, 0].argmax()))
    return seq[len(ids):]


def cropped(model, ids, max_new_tokens):
    """Wrong: reads only the last 48 tokens of the sequence (a fixed window), not the whole of
    it."""
    seq = list(ids)
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            seq.append(int(model(torch.tensor([seq[-48:]]))[0, -1].argmax()))
    return seq[len(ids):]


def cached(model, ids, max_new_tokens):
    """Wrong for this exercise: the right tokens, but from the package's cached loop."""
    import minispec as ms
    return ms.generate(model, ids, max_new_tokens).tokens


def _cached_loop(model, ids, max_new_tokens, cache):
    """Greedy decoding that feeds only the new tokens and reuses the keys and values in `cache`."""
    new, out = list(ids), []
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            logits = model(torch.tensor([new]), cache)[0, -1]  # (V,)
            new = [int(logits.argmax())]
            out += new
    return out


def hand_built_cache(model, ids, max_new_tokens):
    """Wrong for this exercise: the right tokens, from a KV cache built by hand (no new_cache
    call)."""
    return _cached_loop(model, ids, max_new_tokens, KVCache(model.config))


def new_cache(model, ids, max_new_tokens):
    """Wrong for this exercise: the right tokens, from the model's own new_cache()."""
    return _cached_loop(model, ids, max_new_tokens, model.new_cache())


def fresh_cache_per_call(model, ids, max_new_tokens):
    """Wrong for this exercise: the whole sequence every step, but each forward handed a KV
    cache."""
    seq = list(ids)
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            logits = model(torch.tensor([seq]), cache=model.new_cache())[0, -1]
            seq.append(int(logits.argmax()))
    return seq[len(ids):]


def own_model(model, ids, max_new_tokens):
    """Wrong: ignores the model it is handed and decodes with a cached copy of its own."""
    import minispec as ms
    return ms.generate(ms.load_model("target"), ids, max_new_tokens).tokens


# found by reviews: the check must reject these too (tests/test_exercises.py)
more_wrong = [cropped, cached, hand_built_cache, new_cache, fresh_cache_per_call, own_model]
