"""What a review found at stop 46. The core: tree options that passed validation and then crashed
inside torch, prompt ids that crashed with TypeError or OverflowError, load_model's advice for a
drafter's file that holds no heads. The real-model path: RMSNorm overflowing in float16, an odd
head size, transformers models that converted silently wrong. The rules: fractional draft tokens
truncated. GPT(n_head=0): a ZeroDivisionError. 26 of these 31 tests failed on main e5041af; the
2.5 id and n_head=5 (refused before too), integral ids or tokens of other types and grow_tree's new
docstring example guard what must keep working."""
import math

import pytest
import torch

import minispec as ms


def test_integral_float_branching_is_used_as_ints(byte_pair):
    """branching=(2.0, 2.0) passed the check but reached torch.topk and multinomial as floats."""
    target, draft = byte_pair
    drafter = ms.ModelDrafter(draft, branching=(2.0, 2.0), width=2.0)
    assert drafter.branching == (2, 2) and drafter.width == 2
    assert all(type(k) is int for k in drafter.branching) and type(drafter.width) is int
    ids = [1, 2, 3]
    res = ms.speculative_generate(target, drafter, ids, 12, gamma=4)
    assert res.tokens == ms.generate(target, ids, 12).tokens
    sampled = ms.speculative_generate(target, drafter, ids, 12, gamma=4, temperature=1.0)
    assert len(sampled.tokens) == 12


@pytest.mark.parametrize("kw, match", [(dict(branching=4), "branching must be a non-empty tuple"),
                                       (dict(branching=(2, 2), width=1.5), "width"),
                                       (dict(branching=(2, None)), "branching"),
                                       (dict(branching=(2, math.inf)), "branching")])
def test_bad_tree_options_raise_value_error(byte_pair, kw, match):
    with pytest.raises(ValueError, match=match):
        ms.ModelDrafter(byte_pair[1], **kw)


def test_more_children_than_the_vocabulary_at_temperature_0(byte_pair):
    """branching=(300,) over 256 tokens: topk(300) raised 'selected index k out of range'."""
    target, draft = byte_pair
    ids = [5, 6, 7]
    res = ms.speculative_generate(target, ms.ModelDrafter(draft, branching=(300,)), ids, 8, 4)
    assert res.tokens == ms.generate(target, ids, 8).tokens


@pytest.mark.parametrize("ids, match", [([1, None], "token id must be an integer"),
                                        ([1, math.inf], "token id must be an integer"),
                                        ([1, math.nan], "token id must be an integer"),
                                        ([1, 2.5], "token id must be an integer"),
                                        (5, "ids must be a list of token ids"),
                                        (None, "ids must be a list of token ids")])
def test_prompt_ids_that_are_not_integers_raise_value_error(byte_pair, ids, match):
    target, draft = byte_pair
    for call in (lambda: ms.generate(target, ids, 4),
                 lambda: ms.speculative_generate(target, draft, ids, 4)):
        with pytest.raises(ValueError, match=match):
            call()


def test_integral_ids_of_other_types_still_work(byte_pair):
    target, _ = byte_pair
    ref = ms.generate(target, [1, 2, 3], 4).tokens
    assert ms.generate(target, [1.0, 2, torch.tensor(3).item()], 4).tokens == ref
    assert ms.generate(target, torch.tensor([[1, 2, 3]]), 4).tokens == ref


def test_load_model_on_a_file_without_heads_points_to_load_drafter():
    """learned_stop.pt holds a stop rule, not heads: it was sent to medusa/hydra/eagle."""
    with pytest.raises(ValueError, match=r"learned_stop.pt is not a GPT.*load_drafter\(its name"):
        ms.load_model("learned_stop")


def test_grow_tree_docstring_example_runs():
    """The example was grow_tree(ModelDrafter(...).expand, ...): no cache yet, AttributeError."""
    tree = ms.ModelDrafter(ms.load_model("draft"), branching=(2, 2)).draft(ms.encode("def "), 6)
    assert 1 <= len(tree.tokens) <= 6 and int(tree.depths().max()) <= 2


# --- the real-model path: minispec's Llama and the transformers bridge --------------------------

def test_rmsnorm_in_float16_does_not_overflow():
    """SmolLM2's residual stream reaches about 25,000, and 25,000^2 overflows float16 (max 65,504):
    RMSNorm gave zeros. It now computes in float32, as transformers does, and float64 stays
    float64 (the exactness tests run there)."""
    from minispec.bridge.llama import RMSNorm
    norm = RMSNorm(8, 1e-5)
    x = 1000 * torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    ref = norm(x)
    half = norm.half()(x.half())
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.float(), ref, rtol=2e-3, atol=2e-3)
    x64 = x.double()
    exact = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5)
    assert norm.double()(x64).dtype == torch.float64
    torch.testing.assert_close(norm(x64), exact, rtol=1e-12, atol=1e-12)


def test_llama_with_an_odd_head_size_raises_value_error():
    """n_embd=18, n_head=2: a head of 9 dimensions has no pairs for RoPE (was a shape error)."""
    from minispec.bridge.llama import Llama, LlamaConfig
    with pytest.raises(ValueError, match="even"):
        Llama(LlamaConfig(vocab_size=8, block_size=16, n_layer=1, n_head=2, n_kv_head=1, n_embd=18,
                          n_hidden=16))


@pytest.mark.parametrize("extra, name", [(dict(hidden_act="gelu"), "hidden_act"),
                                         (dict(head_dim=16), "head_dim"),
                                         (dict(attention_bias=True), "attention_bias"),
                                         (dict(mlp_bias=True), "mlp_bias"),
                                         (dict(tie_word_embeddings=False), "tie_word_embeddings"),
                                         (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}),
                                          "rope_parameters")])
def test_from_hf_refuses_a_llama_it_would_convert_wrongly(extra, name, optional):
    """A GELU Llama converted silently with SiLU, biases or another head size crashed in
    load_state_dict: each is now a ValueError naming the setting."""
    transformers = optional("transformers")
    from minispec.bridge.hf import from_hf
    base = dict(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                tie_word_embeddings=True, rope_theta=1000.0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**base, **extra}))
    with pytest.raises(ValueError, match=f"differs from minispec's architecture.*{name}"):
        from_hf(hf)


def test_from_hf_reads_rope_scaling_of_a_transformers_4_config():
    """transformers 4.x has no rope_parameters: RoPE scaling sits in rope_scaling, and the old
    fallback {"rope_theta": ...} dropped it (Llama 3's scaled RoPE converted as plain RoPE)."""
    from types import SimpleNamespace

    from minispec.bridge.hf import from_hf
    config = SimpleNamespace(model_type="llama", rope_theta=5e5, hidden_act="silu",
                             tie_word_embeddings=True, hidden_size=32, num_attention_heads=4,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0})
    with pytest.raises(ValueError, match="rope_parameters.*llama3"):
        from_hf(SimpleNamespace(config=config, lm_head=None))  # a stand-in with a head


def test_from_hf_refuses_an_untied_gpt2(optional):
    """minispec's GPT has one matrix for wte and lm_head: an untied GPT-2 lost its head."""
    transformers = optional("transformers")
    from minispec.bridge.hf import from_hf
    config = transformers.GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                     tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        from_hf(transformers.GPT2LMHeadModel(config))


@pytest.mark.parametrize("call", [
    lambda: ms.greedy_accept([1.7, 2.2], torch.eye(3)[[1, 2, 0]]),
    lambda: ms.speculative_accept([0.5], torch.full((1, 3), 1 / 3), torch.full((2, 3), 1 / 3)),
    lambda: ms.multi_draft_accept([0.5], torch.full((3,), 1 / 3), torch.full((3,), 1 / 3)),
    lambda: ms.multi_draft_accept([math.nan], torch.full((3,), 1 / 3), torch.full((3,), 1 / 3))])
def test_the_rules_refuse_fractional_tokens(call):
    """greedy_accept([1.7, 2.2], ...) read the drafts as [1, 2]: int() truncated them silently."""
    with pytest.raises(ValueError, match="must be an integer in"):
        call()


def test_the_rules_still_take_integral_tokens_of_any_type():
    p = torch.eye(3)[[1, 2, 0]]
    assert ms.greedy_accept([1, 2], p) == ms.greedy_accept([1.0, 2.0], p) == (2, 0)
    assert ms.greedy_accept(torch.tensor([1, 2]), p) == (2, 0)
    g = torch.Generator().manual_seed(0)
    assert ms.multi_draft_accept([2.0], torch.eye(3)[2], torch.eye(3)[2], g) == 2


@pytest.mark.parametrize("n_head", [0, 5])
def test_gpt_with_a_bad_head_count_raises_value_error(n_head):
    """n_head=0 was a ZeroDivisionError in the divisibility check itself."""
    with pytest.raises(ValueError, match="n_head"):
        ms.GPT(ms.GPTConfig(vocab_size=8, block_size=16, n_layer=1, n_head=n_head, n_embd=8))
