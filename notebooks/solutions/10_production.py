"""Notebook 10, exercise "the conversion back": a reference solution and wrong answers (each a
mistake that loads, or nearly loads, and gives another model)."""
import minispec as ms


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


def split_prefix(state):
    """Wrong: the prefix cut at the first dot, which also cuts "lm_head.weight" to "weight": it
    passed while the check tried only checkpoints without the head (found by a red team)."""
    ours = {}
    for k, v in state.items():
        if k.endswith(BUFFERS):
            continue
        name = k.split(".", 1)[1]
        ours[name] = v.t() if name.endswith(CONV1D) else v
    ours.setdefault("lm_head.weight", ours["wte.weight"])
    return ours


def package_converter(state):
    """Wrong for this exercise: the package's own conversion, wrapped (the check once compared
    only the function object); its config read off the shapes (n_head does not show in them)."""
    from minispec.bridge.hf import from_hf_state_dict
    V, C = state["transformer.wte.weight"].shape
    L = sum(k.endswith(".ln_1.weight") for k in state)
    T = state["transformer.wpe.weight"].shape[0]
    config = ms.GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=1, n_embd=C)
    return from_hf_state_dict(state, config).state_dict()


more_wrong = [drops_c_attn_bias, transposes_where_shapes_differ, split_prefix, package_converter]
