"""Two reviews at stop 53, a newcomer's and one of the inputs beyond the core: each test fails on
the code before its fix. The worst two were silent wrong answers in the kit: `acceptance_rate` of
logits (not distributions) returned -2403.1 for a true 0.992, and `chi2_pvalue` of frequencies (not
counts) returned 1.0, a pass for any law.
"""
import copy

import pytest
import torch

import minispec as ms
from minispec.batch import RaggedCache
from minispec.kit import checks, data, paper, theory, training
from minispec.methods.eagle import EagleDrafter, load_eagle
from minispec.methods.eagle_llama import EagleLlamaDrafter, EagleLlamaHead, load_eagle_llama
from minispec.methods.heads import medusa_tree
from minispec.model import WEIGHTS_DIR
from test_llama import random_llama


@pytest.fixture(scope="module")
def pair():
    return ms.load_model("target"), ms.load_model("draft")


# --- silent wrong answers in the kit -------------------------------------------------------------

def test_acceptance_rate_and_tv_refuse_logits(pair):
    target, draft = pair
    x = torch.tensor([ms.encode("def fib(n):\n")])
    with torch.no_grad():
        p_logits, q_logits, rows = target(x)[0, -1], draft(x)[0, -1], target(x)[0]
    for law in (theory.acceptance_rate, theory.tv_distance):
        with pytest.raises(ValueError, match=r"distributions.*\(sums .* to .*\).*ms.probs"):
            law(p_logits, q_logits)
        with pytest.raises(ValueError, match="distributions"):  # nan is no distribution either
            law(torch.tensor([float("nan"), 1.0]), torch.tensor([0.5, 0.5]))
    p, q = ms.probs(p_logits), ms.probs(q_logits)
    alpha = theory.acceptance_rate(p, q)
    assert 0 <= float(alpha) <= 1
    assert torch.isclose(alpha, 1 - theory.tv_distance(p, q), atol=1e-6)  # alpha = 1 - TV
    rows = ms.probs(rows)  # (T, V): a distribution per row still passes
    half = rows.to(torch.bfloat16)  # bfloat16 rounding leaves sums ~0.2% off 1: still laws
    assert torch.allclose(theory.acceptance_rate(half, half).float(), torch.ones(()), atol=0.02)
    assert theory.acceptance_rate(rows, rows).shape == (x.shape[1],)


def test_chi2_refuses_frequencies_and_empty_counts():
    with pytest.raises(ValueError, match="whole numbers.*frequencies"):
        checks.chi2_pvalue([0.9, 0.1], [0.5, 0.5])  # returned 1.0: a pass
    with pytest.raises(ValueError, match="not all 0"):
        checks.chi2_pvalue([0, 0], [0.5, 0.5])  # returned 1.0 as well
    assert checks.chi2_pvalue([900, 100], [0.5, 0.5]) < 1e-100  # the same data as counts
    assert checks.chi2_pvalue(torch.tensor([51.0, 49.0]), [0.5, 0.5]) > 0.5  # float counts: fine


def test_dense_refuses_a_token_outside_the_vocabulary():
    with pytest.raises(ValueError, match=r"tokens in \[0, 4\)"):
        checks.dense({(-1,): 1.0}, 4, 1)  # was written to the last cell
    with pytest.raises(ValueError, match=r"tokens in \[0, 4\)"):
        checks.dense({(4,): 1.0}, 4, 1)
    assert checks.dense({(3,): 1.0}, 4, 1)[3] == 1.0


def test_repeated_share_takes_a_tensor_of_tokens():
    """A tensor of tokens raised "Boolean value of Tensor ... is ambiguous"; past that, its items
    (0-d tensors) hash by identity and match no n-gram: 0.0 for one token of a loop."""
    prompt, new = ms.encode("abcabc"), ms.encode("abca")
    assert checks.repeated_share(prompt, torch.tensor(new)) == checks.repeated_share(prompt, new)
    assert checks.repeated_share(prompt, torch.tensor(new[:1])) == 1.0  # "a" completes "bca"


# --- data given as a list (what ms.encode returns) -----------------------------------------------

def test_data_functions_take_a_list_of_ids(pair):
    target, draft = pair
    text = data.heldout()[:700]
    as_list = text.tolist()
    assert data.bits_per_byte(target, as_list, 64, 2) == data.bits_per_byte(target, text, 64, 2)
    assert data.alignment(target, draft, as_list, 64, 2) == data.alignment(target, draft, text,
                                                                             64, 2)
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    x1, y1 = training.get_batch(as_list, 2, 16, g1)
    x2, y2 = training.get_batch(text, 2, 16, g2)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)


def test_data_functions_check_block_size_and_vocabularies(pair):
    target, _ = pair
    text = data.heldout()[:700]
    with pytest.raises(ValueError, match="block_size"):
        data.bits_per_byte(target, text, block_size=0)  # was a ZeroDivisionError
    with pytest.raises(ValueError, match="block_size"):
        data.alignment(target, target, text, block_size=0)  # was (nan, nan)
    other = random_llama(vocab_size=300, block_size=64)
    with pytest.raises(ValueError, match="vocabularies differ: 256 and 300"):
        data.alignment(target, other, text, 32, 2)  # was a tensor size RuntimeError


def test_medusa_windows_must_outlast_the_heads(pair):
    target, _ = pair
    heads = ms.load_heads(target, "medusa")
    n = len(heads.res)
    x = data.heldout()[:n + 1][None]
    with pytest.raises(ValueError, match=f"sequences of {n} tokens.*{n} heads"):
        training.medusa_loss(target, heads, x[:, :n])  # was nan, silently
    assert torch.isfinite(training.medusa_loss(target, heads, x))


# --- the Llama (SmolLM2's tokenizer: test_smollm2.py) --------------------------------------------

def test_llama_refuses_a_one_dimensional_prompt():
    model = random_llama(vocab_size=16, block_size=32)
    ids = [1, 2, 3]
    for bad in (torch.tensor(ids), ids):  # an IndexError and an AttributeError before
        with pytest.raises(ValueError, match=r"idx must be \(B, T\).*torch.tensor\(\[ids\]\)"):
            model(bad)
    assert model(torch.tensor([ids])).shape == (1, 3, 16)


# --- drafters: a rebuilt target, mixed-up heads, bad arguments -----------------------------------

@pytest.mark.parametrize("name", ["hydra", "eagle", "early_exit", "layer_skip", "streaming"])
def test_a_reloaded_target_is_named_in_the_message(pair, name):
    target, _ = pair
    drafter = ms.load_drafter(name, target, **({"skip": [2]} if name == "layer_skip" else {}))
    again = copy.deepcopy(target)  # the same weights, another object: a notebook's re-run cell
    with pytest.raises(ValueError, match="reloaded"):
        ms.speculative_generate(again, drafter, ms.encode("def "), 4)


def test_eagle_heads_of_a_gpt_and_a_llama_are_not_mixed(pair, tmp_path):
    target, _ = pair
    llama = random_llama(vocab_size=16, n_embd=16, n_head=4, n_kv_head=2, block_size=32)
    llama_head = EagleLlamaHead(llama, list(range(8)), layers=(0, 1))
    with pytest.raises(ValueError, match="GPT's EAGLE head.*EagleLlamaHead"):
        EagleDrafter(llama_head)  # was a shape RuntimeError at the first draft
    with pytest.raises(ValueError, match="Llama's EAGLE head.*EagleHead"):
        EagleLlamaDrafter(load_eagle(target))  # was an AttributeError
    with pytest.raises(ValueError, match="eagle_head.pt is not a Llama's EAGLE head"):
        load_eagle_llama(llama, WEIGHTS_DIR / "eagle_head.pt")  # was KeyError: 'keep'


def test_early_exit_message_names_the_depth():
    two = ms.GPT(ms.GPTConfig(vocab_size=8, block_size=16, n_layer=2, n_head=1, n_embd=8))
    with pytest.raises(ValueError, match="n_layer=2") as err:
        ms.EarlyExitDrafter(two, k=2)
    assert "one layer" not in str(err.value)  # said "a model of one layer" of a two-layer model


def test_medusa_tree_checks_its_arguments():
    with pytest.raises(ValueError, match="one row of rank accuracies per head"):
        medusa_tree([], 4)  # an IndexError
    with pytest.raises(ValueError, match="size"):
        medusa_tree([[0.5, 0.2]], -1)  # returned [] silently
    assert medusa_tree([[0.5, 0.2]], 1) == [(0,)]


def test_load_drafter_with_swapped_arguments_says_so_briefly(pair):
    target, _ = pair
    with pytest.raises(ValueError, match="unknown drafter a GPT: shipped drafters") as err:
        ms.load_drafter(target, "hydra")
    assert len(str(err.value)) < 400  # it printed the whole model


# --- options -------------------------------------------------------------------------------------

def test_an_infinite_temperature_is_refused(pair):
    target, draft = pair
    for decode in (lambda: ms.generate(target, [1, 2], 4, temperature=float("inf")),
                   lambda: ms.speculative_generate(target, draft, [1, 2], 4,
                                                   temperature=float("inf"))):
        with pytest.raises(ValueError, match="temperature must be finite"):
            decode()  # sampled uniformly, whatever the model said


def test_the_demo_refuses_zero_threads(capsys):
    from minispec.kit.demo import main
    with pytest.raises(SystemExit) as exit_:
        main(["def ", "--threads", "0"])  # torch's RuntimeError before
    assert exit_.value.code == 2 and "--threads must be at least 1" in capsys.readouterr().err


def test_the_papers_algorithm_checks_its_arguments(pair):
    target, draft = pair
    bad = [(dict(seed=None), "seed must be an integer"),  # torch's RuntimeError before
           (dict(prefix=[]), "the prompt is empty"),  # an embedding dtype RuntimeError
           (dict(prefix=[1, 256]), "each token id"),  # an IndexError
           (dict(prefix="def "), "not text"),  # the loop's own checks, said once
           (dict(M_q=random_llama(vocab_size=300)), "vocabularies differ: 256 and 300")]
    for change, match in bad:
        args = dict(M_p=target, M_q=draft, prefix=[1, 2], max_new_tokens=4, gamma=2, seed=0)
        with pytest.raises(ValueError, match=match):
            paper.speculative_decoding(**{**args, **change})
    out = paper.speculative_decoding(target, draft, [1, 2], 4, 2, seed=-1)  # negative seeds: fine
    assert out == paper.speculative_decoding(target, draft, [1.0, 2.0], 4, 2, seed=-1)


def test_a_ragged_cache_of_no_rows_has_length_0():
    assert RaggedCache(ms.GPTConfig(), 0).length == 0  # "max() arg is an empty sequence"
    for bad in (-1, 2.5, None):
        with pytest.raises(ValueError, match="batch_size"):
            RaggedCache(ms.GPTConfig(), bad)
    assert RaggedCache(ms.GPTConfig(), 2.0).lengths == [0, 0]  # a whole float, as whole allows


class TooFar(ms.Drafter):
    """A learner's drafter with an off-by-one: it drafts the vocabulary's size as a token."""

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        return ms.Tree.chain([256])


def test_a_token_id_outside_the_vocabulary_is_named(pair):
    """An IndexError ("index out of range in self") from the embedding before, for a drafted token,
    for the API contract's example (byte ids into a model of vocab_size 4) and for a Llama."""
    target, _ = pair
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 256\)"):
        ms.speculative_generate(target, TooFar(), ms.encode("def "), 8)
    m = ms.GPT(ms.GPTConfig(vocab_size=4, n_layer=1, n_head=1, n_embd=8, block_size=32))
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 4\)"):
        m(torch.tensor([ms.encode("def fib(n):")]))
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 4\)"):
        m(torch.tensor([[0, -1]]))
    assert m(torch.tensor([[0, 3]])).shape == (1, 2, 4)
    llama = random_llama(vocab_size=16, block_size=32)
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 16\)"):
        llama(torch.tensor([[1, 16]]))


def test_plot_pq_refuses_logits_and_mismatched_laws():
    """plot_pq(logits_p, logits_q) drew logits as probabilities under a meaningless alpha."""
    from minispec.kit import viz
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.2, 0.6])
    for bad in ((p.log(), q.log()), (p, q[:2]), ([0.5, 0.5], [0.4, 0.6])):
        with pytest.raises(ValueError, match="distributions|tensors of one shape"):
            viz.plot_pq(*bad)  # lists: an AttributeError (detach) before
    fig = viz.plot_pq(p, q, labels="abc")
    assert "alpha = 0.600" in fig.axes[0].get_title()
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_from_hf_names_what_it_cannot_convert(optional):
    """from_hf(None) raised an AttributeError (config); a bare LlamaModel, without its head, a
    KeyError ('wte.weight')."""
    transformers = optional("transformers")
    from minispec.bridge.hf import from_hf
    with pytest.raises(ValueError, match=r"only GPT-2 and Llama models convert, got NoneType"):
        from_hf(None)
    llama = transformers.LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16,
                                     num_hidden_layers=1, num_attention_heads=2,
                                     num_key_value_heads=1, tie_word_embeddings=True)
    gpt2 = transformers.GPT2Config(vocab_size=16, n_positions=8, n_embd=8, n_layer=1, n_head=2)
    for bare in (transformers.LlamaModel(llama), transformers.GPT2Model(gpt2)):
        with pytest.raises(ValueError, match="has no language-model head.*AutoModelForCausalLM"):
            from_hf(bare)
    x = torch.tensor([[1, 2, 3]])
    full = transformers.LlamaForCausalLM(llama).eval()
    with torch.no_grad():
        assert (from_hf(full)(x) - full(x).logits).abs().max() < 1e-4


def test_a_drafter_without_draft_says_what_to_define(pair):
    """A subclass that misnames draft (or the base class) raised a bare NotImplementedError."""
    target, _ = pair
    with pytest.raises(NotImplementedError, match="subclass defines draft.*RepeatLast"):
        ms.speculative_generate(target, ms.Drafter(), [1, 2], 4)
