"""The training pieces the notebooks run and show (06: every exit's logits and the early-exit loss;
07: the heads unrolled and their loss, EAGLE's loss; 04: on-policy distillation's rollouts and
divergences; 08: the rounds the learned stop's head is fitted on, its reliability), with random
windows of a byte text and the target's features. They ship with the package so that a notebook
on Colab needs nothing else; scripts/training.py adds saving weights and the training scripts
import the rest from here.
"""
import torch
import torch.nn.functional as F

from ..drafters import ModelDrafter
from ..methods.learned_stop import stop_features
from ..sampling import probs, whole
from ..speculate import speculative_generate
from .data import token_ids


def get_batch(data, batch_size, block_size, generator):
    """Random windows of a byte tensor (a list of ids or bytes too): inputs x and next-byte targets
    y, both (batch_size, block_size)."""
    data, batch_size = token_ids(data), whole(batch_size, "batch_size")
    block_size = whole(block_size, "block_size")  # 0 gave empty windows, 2.5 a TypeError
    if len(data) < block_size + 2:
        raise ValueError(f"{len(data)} tokens of data: get_batch needs block_size + 2 or more")
    # starts 0 .. len - block_size - 2: one short of the last window that fits, kept as it is so
    # that the shipped models' training commands draw the same windows again
    ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=generator)
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


def hidden_states(model, idx):
    """idx (B, T) -> ln_f(h_N) (B, T, C): what lm_head, the heads and EAGLE read."""
    return model.features(idx)


def exit_logits(model, idx):
    """idx (B, T) -> [the logits after block l, through the shared ln_f and head, for l = 1..N]."""
    if not (torch.is_tensor(idx) and idx.dim() == 2):  # a (T,) tensor: an IndexError inside
        raise ValueError(f"idx must be (B, T) token ids, as torch.tensor([ids]); got {idx!r:.60}")
    x, out = model.embed(idx, torch.arange(idx.shape[1], device=idx.device)), []
    for layer in range(model.config.n_layer):
        x = model.blocks(x, layers=[layer])
        out.append(model.lm_head(model.ln_f(x)))
    return out


def early_exit_loss(exits, y):
    """LayerSkip's loss, simplified (linear weights, no curriculum, no layer dropout): the last
    exit's cross-entropy plus the earlier exits', weighted l / N (deeper exits count more),
    loss = CE(exit_N) + sum_{l<N} (l / N) CE(exit_l) / (N - 1). -> (loss, [CE of each exit])"""
    N = len(exits)
    if not N:
        raise ValueError("exits must hold the logits of at least one exit (exit_logits)")
    ce = [F.cross_entropy(e.flatten(0, 1), y.flatten()) for e in exits]
    early = sum(k / N * ce[k - 1] for k in range(1, N))  # exits 1..N-1 (the l of the formula)
    return ce[-1] + early / max(N - 1, 1), ce


def unroll(heads, h, x):
    """Medusa / Hydra heads on h (B, T, C), the hidden states of x (B, T) -> [head i's logits at
    t = 0..T-2-i: (B, T-1-i, V)]; Hydra's heads read the true tokens (teacher forcing)."""
    T, z, out = x.shape[1], h, []
    if T <= len(heads.res):  # else the last head's loss is a mean over nothing: nan
        raise ValueError(f"sequences of {T} tokens leave the last of {len(heads.res)} heads no "
                         "token to predict: give sequences longer than the heads")
    if not heads.sequential:
        return [lg[:, :T - 1 - i] for i, lg in enumerate(heads(h[:, :T - 1]).unbind(-2))]
    for i in range(len(heads.res)):  # head i reads the true token x_{t+1+i}
        z = heads.advance(z[:, :T - 1 - i], i, x[:, 1 + i:])
        out.append(heads.logits(z))
    return out


def medusa_loss(model, heads, x):
    """Self-distillation (Medusa-1): head i at t matches the frozen target's p_{t+2+i}, computed at
    t + 1 + i, the distribution of the token it guesses,
        L = mean_i CE(p_{t+2+i}, softmax(logits_i(t)))."""
    with torch.no_grad():
        h = hidden_states(model, x)  # (B, T, C)
        p = torch.softmax(model.lm_head(h), -1)  # (B, T, V)
    out = unroll(heads, h, x)
    ce = [-(p[:, 1 + i:] * torch.log_softmax(lg, -1)).sum(-1).mean()
          for i, lg in enumerate(out)]
    return sum(ce) / len(out)


def eagle_loss(head, f, x, noise=0.1, w_cls=0.1, generator=None, g=None):
    """EAGLE's teacher-forced loss (Li et al. 2024) on the frozen target's features f (B, T, C) of
    tokens x (B, T): the head reads f_t + U(-noise, noise) and x_{t+1} and predicts f_{t+1},
        L = SmoothL1(f_hat_{t+1}, f_{t+1}) + w_cls * CE(p_{t+2}, q_{t+2}).
    g: other input features (B, T, C) to read instead of f (scripts/eagle3_experiment.py's fused
    ones)."""
    g = f if g is None else g
    u = torch.rand(g[:, :-1].shape, generator=generator).to(g)  # U(0, 1)
    f_in = g[:, :-1] + noise * (2 * u - 1)
    f_hat = head(f_in, x[:, 1:])  # (B, T-1, C)
    p = torch.softmax(head.logits(f[:, 1:]), -1)
    ce = -(p * torch.log_softmax(head.logits(f_hat), -1)).sum(-1).mean()
    return F.smooth_l1_loss(f_hat, f[:, 1:]) + w_cls * ce


@torch.no_grad()
def draft_rollouts(model, prefixes, n_new, generator, temperature=1.0):
    """Continue each prefix (B, P) by n_new bytes the draft samples itself -> (B, P + n_new)."""
    cache = model.new_cache(prefixes.shape[0])
    logits, out = model(prefixes, cache)[:, -1], [prefixes]
    for _ in range(n_new):
        token = torch.multinomial(probs(logits, temperature), 1, generator=generator)
        out.append(token)
        logits = model(token, cache)[:, -1]
    return torch.cat(out, 1)


def divergence(log_p, log_q, kind):
    """Mean over positions of KL(p || q) ("kl"; 0 log 0 = 0) or TV(p, q) ("tv"); inputs (..., V)."""
    if kind == "kl":
        return (log_p.exp() * (log_p - log_q)).nan_to_num(0.0, float("inf")).sum(-1).mean()
    if kind != "tv":
        raise ValueError(f"kind must be 'kl' or 'tv', got {kind!r}")
    return 0.5 * (log_p.exp() - log_q.exp()).abs().sum(-1).mean()


class RoundLogger(ModelDrafter):
    """A fixed chain of gamma drafts that logs one row per drafted token after each round: (f,
    label, depth), f the learned stop's features (methods.learned_stop.stop_features) and label
    the chance the target keeps the token GIVEN the drafts before it, from that round's logits:
    T = 0: 1 if it is the target's argmax, else 0; T > 0: min(1, p(x) / q(x)), the acceptance
    probability (soft: the sampled coin's expectation). rows: the list it appends to."""

    def __init__(self, model, temperature, rows):
        super().__init__(model)
        self.temperature = temperature
        self.rows = rows

    def accept(self, context, tree, path, hidden, logits):
        super().accept(context, tree, path, hidden, logits)
        n = len(tree.tokens)
        if not n:
            return
        seq = torch.tensor([list(context) + tree.tokens], device=self.model.wte.weight.device)
        q_logits = self.model(seq)[0, len(context) - 1:-1]  # (n, V): the draft's, as it drafted
        p = probs(logits[-(n + 1):-1].double(), self.temperature).cpu()  # (n, V): the target's
        for d, x in enumerate(tree.tokens):
            if self.temperature == 0:
                label = float(int(p[d].argmax()) == x)
            else:  # tree.q[d - 1]: the q node d was drawn from
                label = min(1.0, float(p[d, x] / tree.q[d - 1].double()[x]))
            self.rows.append((stop_features(q_logits[d], x).cpu(), label, d))


def acceptance_rows(target, draft, prompts, temperature, new_tokens=64, gamma=8):
    """Rounds of fixed chains of gamma drafts through the loop after each prompt (seed i for prompt
    i) -> features (N, 3), labels (N,), depths (N,) of every drafted token."""
    if not isinstance(draft, torch.nn.Module):
        raise ValueError(f"draft must be the draft model (a GPT), not {type(draft).__name__}")
    rows = []
    for i, ids in enumerate(prompts):
        speculative_generate(target, RoundLogger(draft, temperature, rows), ids, new_tokens,
                             gamma=gamma, temperature=temperature, seed=i)
    if not rows:  # no prompts, or a drafter that drafted nothing
        raise ValueError(f"no drafted tokens to label from {len(prompts)} prompts: give prompts "
                         "(lists of token ids) and a drafter that drafts")
    return (torch.stack([r[0] for r in rows]), torch.tensor([r[1] for r in rows]),
            torch.tensor([r[2] for r in rows]))


def reliability(a, y, edges=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0)):
    """Predicted chances a (N,) against observed labels y (N,), binned by a -> rows (low, high,
    count, mean a, mean y), one per non-empty bin: a calibrated head has mean a ~ mean y."""
    a, y = (torch.as_tensor(x, dtype=torch.float64) for x in (a, y))  # lists, 0/1 labels too
    out = []
    if a.shape != y.shape or a.dim() != 1:
        raise ValueError(f"a and y must be (N,) each, got {tuple(a.shape)} and {tuple(y.shape)}")
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = (a >= lo) & ((a < hi) if hi < edges[-1] else (a <= hi))
        if inside.any():
            mean_a, mean_y = float(a[inside].mean()), float(y[inside].mean())
            out.append((lo, hi, int(inside.sum()), mean_a, mean_y))
    return out
