"""minispec: speculative decoding, small enough to read and checked claim by claim."""
from .sampling import probs, sample
from .verify import greedy_accept, multi_draft_accept, residual, speculative_accept
from .decode import Result, Step, generate, speculative_generate
from .drafters import Drafter, ModelDrafter
from . import viz
# imported last: `from .decode import ...` binds minispec.decode to the submodule, and the
# public name ms.decode is the byte decoder
from .model import GPT, GPTConfig, KVCache, decode, encode, load_model
from .theory import (acceptance_rate, accepted_pmf, alpha_from_acceptance, best_gamma, expected_tokens,
                     speedup, tv_distance)

__all__ = ["GPT", "GPTConfig", "KVCache", "decode", "encode", "load_model", "probs", "sample",
           "greedy_accept", "multi_draft_accept", "residual", "speculative_accept", "Result", "Step",
           "generate", "speculative_generate", "Drafter", "ModelDrafter", "acceptance_rate", "accepted_pmf",
           "alpha_from_acceptance", "best_gamma", "expected_tokens", "speedup", "tv_distance"]
