"""The paper, side by side: Leviathan et al. 2023 (Fast Inference from Transformers via
Speculative Decoding), Algorithm 1, SpeculativeDecodingStep, transcribed line for line in the
paper's notation: target M_p, draft M_q, gamma guesses x_1..x_gamma, their distributions q_i and
p_i, r_i ~ U(0, 1), n accepted, p'(x) = norm(max(0, p_{n+1}(x) - q_{n+1}(x))). The paper counts
from 1, Python from 0: p_i is p[i - 1].

A reference to read next to the package's loop (minispec.speculate), not a fast path: one
prompt, a chain from one draft model, no KV cache (each call is a full forward). Two things the
paper leaves open are settled as the package settles them, so that on the same torch.Generator
both make the same draws, token for token (tests/test_paper.py):
  * r_i is drawn when it is read, so none after the first rejection (the paper draws r_1..r_gamma
    all at once; the output's law is the same, the generator's stream is not);
  * the last step guesses no more than the tokens still wanted, less the one M_p adds.
Example: speculative_decoding(load_model("target"), load_model("draft"), encode("def "), 24, 4)
"""
import torch

from ..rounds import check_prompt
from ..sampling import probs, whole


@torch.no_grad()
def speculative_decoding_step(M_p, M_q, prefix, gamma, generator, temperature=1.0, top_k=None,
                              top_p=None):
    """Algorithm 1, SpeculativeDecodingStep: prefix (list of ids) -> prefix + [x_1..x_n, t]."""
    def dist(M, ids):  # M's warped next-token distribution after each token of ids
        return probs(M(torch.tensor([ids]))[0], temperature, top_k, top_p)
    # Sample gamma guesses x_1..x_gamma from M_q autoregressively.
    x, q = [], []
    for i in range(gamma):
        q.append(dist(M_q, prefix + x)[-1])  # q_i(x) <- M_q(prefix + [x_1..x_{i-1}])
        x.append(int(torch.multinomial(q[i], 1, generator=generator)))  # x_i ~ q_i(x)
    # Run M_p in parallel: p_1(x)..p_{gamma+1}(x) <- M_p(prefix), ..., M_p(prefix + [x_1..x_gamma]).
    p = dist(M_p, prefix + x)[-gamma - 1:]
    # Determine the number of accepted guesses n (r_i > p_i(x_i) / q_i(x_i) rejects x_i).
    n = gamma
    for i in range(gamma):
        r_i = torch.rand((), generator=generator)  # r_i ~ U(0, 1)
        if r_i > p[i][x[i]] / q[i][x[i]]:
            n = i
            break
    # Adjust the distribution from M_p if needed.
    p_prime = p[n]  # p'(x) <- p_{n+1}(x)
    if n < gamma:
        p_prime = torch.clamp(p[n] - q[n], min=0)
        p_prime = p_prime / p_prime.sum()  # p'(x) <- norm(max(0, p_{n+1}(x) - q_{n+1}(x)))
    # Return one token from M_p, and n tokens from M_q.
    t = int(torch.multinomial(p_prime, 1, generator=generator))  # t ~ p'(x)
    return prefix + x[:n] + [t]


def speculative_decoding(M_p, M_q, prefix, max_new_tokens, gamma, seed=0, temperature=1.0,
                         top_k=None, top_p=None, crop_prompt=False):
    """SpeculativeDecodingStep until max_new_tokens new tokens -> the new tokens (a list of ids).
    M_p, M_q: two models (GPTs or Llamas: Algorithm 1 runs the draft model itself, not a Drafter);
    gamma >= 1 and max_new_tokens >= 0 whole numbers (4 or 4.0); crop_prompt as the loop's."""
    for name, M in (("M_p", M_p), ("M_q", M_q)):
        if not hasattr(M, "new_cache"):  # None; a Drafter (load_drafter's) is not a model
            raise ValueError(f"Algorithm 1 takes two models: {name} must be a GPT or a Llama, "
                             f"got a {type(M).__name__}")
    gamma = whole(gamma, "gamma")
    room = f"max_new_tokens (block_size={M_p.config.block_size} holds the prompt and them)"
    max_new_tokens = whole(max_new_tokens, room, 0, M_p.config.block_size)  # as the loop's
    V = M_p.config.vocab_size
    if M_q.config.vocab_size != V:
        raise ValueError(f"M_p and M_q vocabularies differ: {V} and {M_q.config.vocab_size}")
    prefix = check_prompt(M_p, prefix, max_new_tokens, crop_prompt)  # the loop's checks
    generator = torch.Generator().manual_seed(whole(seed, "seed", -2**63, 2**64))
    out = list(prefix)
    while len(out) < len(prefix) + max_new_tokens:
        left = len(prefix) + max_new_tokens - len(out)
        out = speculative_decoding_step(M_p, M_q, out, min(gamma, left - 1), generator,
                                        temperature, top_k, top_p)
    return out[len(prefix):]
