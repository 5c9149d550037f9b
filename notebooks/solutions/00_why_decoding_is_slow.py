"""Notebook 00, exercise "decode without a cache": a reference solution and a classic wrong answer."""
import torch


def solution(model, ids, max_new_tokens):
    """Greedy decoding with no KV cache: rerun the model on the whole sequence at every step."""
    seq = list(ids)
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            logits = model(torch.tensor([seq]))[0, -1]   # (V,) only the last position predicts the next token
            seq.append(int(logits.argmax()))
    return seq[len(ids):]


def wrong(model, ids, max_new_tokens):
    """The classic mistake: the argmax of the FIRST position's logits (the prediction after ids[0])."""
    seq = list(ids)
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            seq.append(int(model(torch.tensor([seq]))[0, 0].argmax()))
    return seq[len(ids):]


def cropped(model, ids, max_new_tokens):
    """Wrong: reads only the last 48 tokens of the sequence (a fixed window), not the whole of it."""
    seq = list(ids)
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            seq.append(int(model(torch.tensor([seq[-48:]]))[0, -1].argmax()))
    return seq[len(ids):]


def cached(model, ids, max_new_tokens):
    """Wrong for this exercise: the right tokens, but from the package's cached loop."""
    import minispec as ms
    return ms.generate(model, ids, max_new_tokens).tokens


more_wrong = [cropped, cached]  # found by a review: the check must reject these too (tests/test_exercises.py)
