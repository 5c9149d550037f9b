"""Notebook 06 (early exit), exercise "one Jacobi iteration": a reference solution and wrong
answers."""
import torch


def solution(model, ids, guess):
    """y'_i = argmax p(. | ids, guess_<i) for i = 1..W, from one forward pass over ids + guess."""
    with torch.inference_mode():
        logits = model(torch.tensor([list(ids) + list(guess)]))[0]  # (len(ids) + W, V)
    return logits[len(ids) - 1:-1].argmax(-1).tolist()  # row len(ids) - 1 + i sees guess[:i]


def wrong(model, ids, guess):
    """The classic off-by-one: the rows after each guessed token, so position i is predicted from
    guess[:i + 1]."""
    with torch.inference_mode():
        logits = model(torch.tensor([list(ids) + list(guess)]))[0]
    return logits[len(ids):].argmax(-1).tolist()


def one_call_per_position(model, ids, guess):
    """Wrong: the right tokens, but W target passes (one ms.generate call per position), not one."""
    import minispec as ms
    return [ms.generate(model, list(ids) + list(guess[:j]), 1).tokens[0] for j in range(len(guess))]


def another_copy_of_the_model(model, ids, guess):
    """Wrong: one pass per position on a second copy of the target, which the check's hook on the
    given model did not see (it asked for at most one pass; now exactly one, on `model`)."""
    import minispec as ms
    other = ms.load_model("target")
    return one_call_per_position(other, ids, guess)


more_wrong = [one_call_per_position, another_copy_of_the_model]  # reviews found them
