"""Every shipped model and method by name: load_model(name) and load_drafter(name, target), above
the drafters it builds."""
import inspect
from pathlib import Path

from ..drafters import ModelDrafter, PromptLookupDrafter, as_drafter
from ..model import GPT, WEIGHTS_DIR, GPTConfig
from .beam import BeamDrafter
from .copy_cursor import CopyCursorDrafter
from .eagle import EagleDrafter, load_eagle
from .eagle_llama import EagleLlamaDrafter, load_eagle_llama
from .early_exit import EarlyExitDrafter
from .edit_lookup import EditLookupDrafter
from .heads import HeadDrafter, load_heads, read
from .layer_skip import LayerSkipDrafter
from .learned_stop import LearnedStopDrafter
from .lookup_tree import LookupTreeDrafter
from .match_length import MatchLengthDrafter
from .priced import PricedDrafter
from .streaming import StreamingDrafter

KINDS = {"draft": ModelDrafter, "draft_distilled": ModelDrafter, "draft_onpolicy": ModelDrafter,
         "lookup": PromptLookupDrafter, "copy_cursor": CopyCursorDrafter,
         "lookup_tree": LookupTreeDrafter, "edit_lookup": EditLookupDrafter,
         "match_length": MatchLengthDrafter, "priced": PricedDrafter,
         "early_exit": EarlyExitDrafter, "medusa": HeadDrafter, "hydra": HeadDrafter,
         "eagle": EagleDrafter, "beam": BeamDrafter, "layer_skip": LayerSkipDrafter,
         "learned_stop": LearnedStopDrafter, "streaming": StreamingDrafter}


def load_model(name):
    """A shipped model ("target", "draft", "draft_distilled", "draft_onpolicy") or a .pt file path
    -> a GPT in eval mode, fp32, on the CPU (weights are stored in fp16)."""
    path = WEIGHTS_DIR / f"{name}.pt"
    path = path if path.exists() else Path(str(name))  # None, 5: unknown names
    if not (path.suffix == ".pt" and path.exists()):
        raise ValueError(f"unknown model {name!r}: shipped models are ['draft', 'draft_distilled', "
                         "'draft_onpolicy', 'target'], or give a path to a .pt file")
    ckpt = read(path, "a GPT's")  # a tensor, a text file: named
    if "config" not in ckpt:  # heads, a stop rule, ...: a drafter's weights, loaded onto a target
        raise ValueError(f"{path.name} is not a GPT (a dict of its config and state_dict): a "
                         "drafter's file loads onto its target with load_drafter(its name, "
                         "target): 'medusa', 'hydra', 'eagle', ...")
    model = GPT(GPTConfig(**ckpt["config"]))
    state = {k: v.float() for k, v in ckpt["state_dict"].items()}
    state["lm_head.weight"] = state["wte.weight"]
    model.load_state_dict(state)
    return model.eval()


def load_drafter(name, target, **options):
    """A shipped method, ready for speculative_generate(target, drafter, ...): "draft",
    "draft_distilled" (the same network distilled on the target: DistillSpec, Zhou et al. 2024)
    and "draft_onpolicy" (distilled on its own samples too), all with ModelDrafter's options;
    "lookup" (PromptLookupDrafter); "copy_cursor" (CopyCursorDrafter: lookup that keeps its
    place in the text it copies, for answers that edit a given text); "lookup_tree"
    (LookupTreeDrafter: the continuations of several earlier occurrences as one tree);
    "edit_lookup" (EditLookupDrafter: lookup that drafts the answer's earlier edits);
    "match_length" (MatchLengthDrafter: lookup, or the drafter given, drafting the loop's gamma
    tokens after a long match, `short` after a short one, `single` after one); "priced"
    (PricedDrafter: the edit lookup, or the drafter given, drafting the length the speedup formula
    prices best after its match, on v(k) measured now on target unless costs are given);
    "early_exit" (EarlyExitDrafter, default k=2, the exit the shipped target was trained for;
    SmolLM2 was trained for none: its exit at layer 22 of 30 agrees with its top-1 token on 23% of
    tokens, figures/layer_skip_smollm2.md); "medusa", "hydra" (HeadDrafter on the shipped heads,
    each with its default static tree); "eagle" (EagleDrafter: a chain, or EAGLE-2 dynamic trees
    given branching and width; on SmolLM2-135M, EagleLlamaDrafter: EAGLE-3's head, chains); "beam"
    (BeamDrafter: the draft's beam search, width and depth, as a tree of guesses); "layer_skip"
    (LayerSkipDrafter: middle blocks skipped, the set given as skip or searched on each prompt);
    "learned_stop" (LearnedStopDrafter: the draft's chain ended by SpecDec++'s learned stop, option
    threshold); "streaming" (StreamingDrafter: the target drafting with attention sinks and a recent
    window of its cache, options sinks, window).
    Example: load_drafter("hydra", target)
    """
    if not isinstance(name, str) or name not in KINDS:  # a model: load_drafter(name, target)
        got = repr(name) if isinstance(name, str) else f"a {type(name).__name__}"
        raise ValueError(f"unknown drafter {got}: shipped drafters are {sorted(KINDS)}")
    if not hasattr(target, "config") or not hasattr(target, "wte"):
        raise ValueError(f"target must be a model (a GPT, or the Llama of smollm2.load()), got "
                         f"{type(target).__name__}")
    kind = KINDS[name]
    model_free = name in ("lookup", "copy_cursor", "lookup_tree", "edit_lookup", "match_length",
                          "priced")
    if not model_free and name not in ("early_exit", "layer_skip", "streaming", "eagle") \
            and not isinstance(target, GPT):
        raise ValueError(f"the shipped {name!r} was trained for minispec's byte-level GPT target; "
                         f"none exists for a {type(target).__name__}: use 'lookup' or Lookahead")
    takes = list(inspect.signature(kind).parameters)[not model_free:]  # after the model, if any
    for option in options:
        if option not in takes:
            raise ValueError(f"load_drafter({name!r}, ...): {kind.__name__} takes no option "
                             f"{option!r}; its options are {takes}")
    if name == "priced":  # the cost profile measured now, under the kernel in use
        drafter = kind(**options)
        return as_drafter(drafter if drafter.v is not None else drafter.price(target), target)
    if model_free:
        return as_drafter(kind(**options), target)
    if name == "early_exit":
        return as_drafter(EarlyExitDrafter(target, **{"k": 2, **options}), target)
    if name in ("layer_skip", "streaming"):  # the target drafts for itself
        return as_drafter(kind(target, **options), target)
    if name in ("medusa", "hydra"):
        source = load_heads(target, name)
    elif name == "eagle" and not isinstance(target, GPT):  # SmolLM2's head, or a ValueError
        return as_drafter(EagleLlamaDrafter(load_eagle_llama(target), **options), target)
    elif name == "eagle":
        source = load_eagle(target)
    else:  # a draft follows the target's device and dtype, as the heads and EAGLE's head do
        model = "draft" if name in ("beam", "learned_stop") else name
        source = load_model(model).to(target.wte.weight)
    return as_drafter(kind(source, **options), target)
