"""minispec: speculative decoding, small enough to read and checked claim by claim."""
from . import batch, data, viz
from .adaptive import Fixed, Heuristic
from .drafters import Drafter, FallbackDrafter, ModelDrafter, PromptLookupDrafter, load_drafter
from .model import GPT, GPTConfig, KVCache, decode, encode, load_model
from .sampling import probs, sample
from .selfspec import EarlyExitDrafter, HeadDrafter, Lookahead, MedusaHeads, load_heads
from .speculate import Result, Stats, Step, generate, speculative_generate
from .theory import (acceptance_rate, accepted_pmf, alpha_from_acceptance, best_gamma, expected_tokens,
                     speedup, tv_distance)
from .tree import Tree
from .verify import accept_prob, greedy_accept, multi_draft_accept, residual, speculative_accept, verify_tree

__all__ = ["GPT", "GPTConfig", "KVCache", "decode", "encode", "load_model", "probs", "sample", "accept_prob",
           "greedy_accept", "multi_draft_accept", "residual", "speculative_accept", "verify_tree", "Tree",
           "Result", "Stats", "Step", "generate", "speculative_generate", "Drafter", "ModelDrafter",
           "PromptLookupDrafter", "FallbackDrafter", "EarlyExitDrafter", "HeadDrafter", "Lookahead", "MedusaHeads",
           "load_heads", "load_drafter", "Fixed", "Heuristic", "acceptance_rate", "accepted_pmf",
           "alpha_from_acceptance", "best_gamma", "expected_tokens", "speedup", "tv_distance"]
