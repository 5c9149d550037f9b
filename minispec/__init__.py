"""minispec: speculative decoding, small enough to read and checked claim by claim.

The core, in reading order: model, sampling, verify, tree, drafters, adaptive, rounds, speculate.
Beyond it: methods, batch, bridge (transformers, optional) and kit (viz, data, theory, the demo).
"""
import sys

from . import tree, verify
from .adaptive import Fixed, Heuristic
from .batch import loop as _batch_loop  # noqa: F401 (ms.batch: a list of prompts goes there)
from .drafters import Drafter, ModelDrafter, PromptLookupDrafter
from .kit import data, theory, viz
from .kit.theory import (acceptance_rate, accepted_pmf, alpha_from_acceptance, best_gamma,
                         expected_tokens, speedup, tv_distance)
from .methods import (EarlyExitDrafter, FallbackDrafter, HeadDrafter, Lookahead, MedusaHeads,
                      load_drafter, load_heads, load_model, typical_accept)
from .model import GPT, GPTConfig, KVCache, decode, encode
from .rounds import Result, Stats, Step
from .sampling import probs, sample
from .speculate import generate, speculative_generate
from .tree import Tree
from .verify import (accept_prob, greedy_accept, multi_draft_accept, residual,
                     speculative_accept, verify_tree)

__all__ = ["GPT", "GPTConfig", "KVCache", "decode", "encode", "load_model", "probs", "sample",
           "accept_prob", "greedy_accept", "multi_draft_accept", "residual", "speculative_accept",
           "verify_tree", "Tree", "Result", "Stats", "Step", "generate", "speculative_generate",
           "Drafter", "ModelDrafter", "PromptLookupDrafter", "FallbackDrafter", "EarlyExitDrafter",
           "HeadDrafter", "Lookahead", "MedusaHeads", "load_heads", "load_drafter", "Fixed",
           "Heuristic", "acceptance_rate", "accepted_pmf", "alpha_from_acceptance", "best_gamma",
           "expected_tokens", "speedup", "tv_distance", "batch", "data", "theory", "tree", "verify",
           "viz"]
sys.modules[__name__ + ".theory"] = theory  # the closed forms moved to the kit; old imports work
verify.typical_accept = typical_accept  # a lossy method, moved to methods; the old name works
sys.modules[__name__ + ".model"].load_model = load_model  # moved to the registry; so is its import
