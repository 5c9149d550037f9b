"""Notebook 10, exercise "the conversion back": a reference solution and wrong answers (each a
mistake that loads, or nearly loads, and gives another model)."""

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
BUFFERS = (".attn.bias", ".attn.masked_bias")  # the causal mask (c_attn's bias: "c_attn.bias")


def solution(state):
    """Drop the mask buffers and the prefix, transpose the Conv1D weights, tie the head if absent.
    """
    ours = {}
    for k, v in state.items():
        if k.endswith(BUFFERS):
            continue
        name = k.removeprefix("transformer.")
        ours[name] = v.t() if name.endswith(CONV1D) else v
    ours.setdefault("lm_head.weight", ours["wte.weight"])
    return ours


def wrong(state):
    """Wrong: the tied head left out (a checkpoint without lm_head.weight does not load)."""
    ours = solution(state)
    if "lm_head.weight" not in state:  # the one step it forgets
        del ours["lm_head.weight"]
    return ours


def drops_c_attn_bias(state):
    """Wrong: every key ending in "attn.bias" dropped, c_attn's real bias with the mask buffers."""
    ours = solution({k: v for k, v in state.items() if not k.endswith(BUFFERS)})
    return {k: v for k, v in ours.items() if not k.endswith("attn.bias")}


def transposes_where_shapes_differ(state):
    """Wrong: transposes only the matrices that are not square, so the square attn.c_proj (C x C)
    loads untransposed and the model computes something else."""
    ours = {}
    for k, v in state.items():
        if k.endswith(BUFFERS):
            continue
        name = k.removeprefix("transformer.")
        square = v.dim() == 2 and v.shape[0] == v.shape[1]
        ours[name] = v.t() if name.endswith(CONV1D) and not square else v
    ours.setdefault("lm_head.weight", ours["wte.weight"])
    return ours


more_wrong = [drops_c_attn_bias, transposes_where_shapes_differ]  # tests/test_exercises.py
