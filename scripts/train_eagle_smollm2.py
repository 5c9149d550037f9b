"""Train the EAGLE-3 head for SmolLM2-135M-Instruct (minispec.methods.eagle_llama) on this CPU.

    nohup nice -n 19 python scripts/train_eagle_smollm2.py > /tmp/eagle_smollm2.log 2>&1 &
    python scripts/train_eagle_smollm2.py --smoke     # a minute: tiny scale, writes to /tmp

Data, all reproducible offline (fixed seeds, one thread):
  * on-policy chat: SmolLM2's own answers (temperature 0.7, at most --answer-tokens tokens) to the
    chat prompts written below (TEMPLATES x TOPICS), sampled in padded batches;
  * code: windows of the local Python standard library (scripts/train.py's corpus_files: the
    held-out files of minispec.kit.data excluded), in SmolLM2's tokens.
The frozen target's features (the residual stream after blocks 2 and 15, RMS-scaled, and the top
f = ln_f(h_30)) are computed once, without gradients, and kept in memory (fp16). The draft
vocabulary is the K most frequent ids of that data (ties: the lower id, an earlier BPE merge).

Loss (EAGLE-3's training-time test, unrolled `--unroll` steps): step 1 reads the fused true
features g_t; step j > 1 reads, at position t, the head's own state s^{j-1}_{t-1} (as it will
when drafting at depth j), with attention to the true entries up to t - j + 1 and to its own
earlier steps' entries at t - j + 2 .. t. Each step's q at t is fitted to the target's p_{t+2}
restricted to the kept ids: loss = sum_j 0.8^(j-1) CE(p, q^j) (no feature regression, as EAGLE-3).
Held out: answers to prompts on other topics (HELD_TOPICS), and the held-out library files: top-1
agreement with the target's argmax by draft depth 1..5 (the true tokens fed, the head's own
states deeper), stored with the weights.
"""
import argparse
import math
import random
import sys
import time
from pathlib import Path

import torch

from minispec.bridge import smollm2
from minispec.kit.data import heldout_files
from minispec.methods.eagle_llama import EagleLlamaHead, rms
from minispec.model import WEIGHTS_DIR

sys.path.insert(0, str(Path(__file__).parent))
from train import corpus_files  # noqa: E402  (scripts/train.py)

TEMPLATES = ["Explain {} in simple terms.", "Write a short story about {}.",
             "Give me three tips about {}.", "Write a short poem about {}.",
             "What are the pros and cons of {}?", "Describe {} to a ten-year-old.",
             "List five interesting facts about {}.", "Why does {} matter? Answer briefly.",
             "Write a friendly email to a colleague about {}.",
             "Summarize the history of {} in one paragraph."]
TOPICS = ["the ocean", "volcanoes", "coffee", "machine learning", "the moon", "gardening",
          "bicycles", "honey bees", "the internet", "chess", "rainy days", "photosynthesis",
          "trains", "learning the piano", "cooking pasta", "friendship", "recycling", "dinosaurs",
          "sleep", "public libraries", "electric cars", "the Roman Empire", "mountains",
          "saving money", "a lost cat", "winter", "video games", "the human heart", "bread",
          "space travel", "a small village", "learning a new language"]
HELD_TOPICS = ["glaciers", "the printing press", "tea"]  # never trained on


def prompts_for(topics):
    return [t.format(topic) for topic in topics for t in TEMPLATES]


@torch.inference_mode()
def features(model, idx, layers, cache=None, pos=None, mask=None, start=0):
    """Tokens (B, T) -> n(h_a), n(h_b), f (B, T, C) each: the head's three inputs."""
    if pos is None:
        pos = torch.arange(start, start + idx.shape[1])
    x, outs, begin = model.embed(idx, pos), [], 0
    for end in (layers[0] + 1, layers[1] + 1, model.config.n_layer):
        x = model.blocks(x, cache, range(begin, end), mask, start, pos)
        outs.append(x)
        begin = end
    return rms(outs[0]), rms(outs[1]), model.ln_f(outs[2])


@torch.inference_mode()
def sample_answers(model, tok, prompts, n, temperature, g, layers, batch=32):
    """Chat prompts -> [(tokens, features (T, 3, C) fp16, the answer's first index)] with the
    target's sampled answers: one
    left-padded batch at a time, each row at its own positions, pads masked out."""
    rows = []
    for i in range(0, len(prompts), batch):
        t0 = time.time()
        ids = [tok.ask(p) for p in prompts[i:i + batch]]
        B, P = len(ids), max(map(len, ids))
        pad = torch.tensor([P - len(p) for p in ids])
        idx = torch.tensor([[0] * (P - len(p)) + p for p in ids])
        valid = pad[:, None] <= torch.arange(P + n)  # (B, S): a key is a real token of its row
        mask = (valid[:, None, :P] & torch.ones(P, P, dtype=torch.bool).tril()) | torch.eye(
            P, dtype=torch.bool)
        cache = model.new_cache(B, P + n)
        feats = features(model, idx, layers, cache, (torch.arange(P) - pad[:, None]).clamp(min=0),
                         mask)
        seqs = [list(p) for p in ids]
        got = [[torch.stack([f[b, pad[b]:] for f in feats], 1)] for b in range(B)]
        done = [False] * B
        for step in range(n):
            p = torch.softmax(model.lm_head(feats[2][:, -1]) / temperature, -1)
            new = torch.multinomial(p, 1, generator=g)[:, 0].tolist()
            for b in range(B):
                if not done[b]:
                    seqs[b].append(new[b])
                    done[b] = new[b] == tok.eos
            if all(done) or step == n - 1:
                break
            pos = P + step - pad[:, None]
            feats = features(model, torch.tensor(new)[:, None], layers, cache, pos,
                             valid[:, None, :P + step + 1], P + step)
            for b in range(B):
                if not done[b]:
                    got[b].append(torch.stack([f[b] for f in feats], 1))
        for b in range(B):  # features for every token but the last one; where the answer starts
            rows.append((seqs[b][:-1], torch.cat(got[b]).half(), len(ids[b])))
        print(f"  answers {i + B}/{len(prompts)}  {time.time() - t0:.0f}s", flush=True)
    return rows


@torch.inference_mode()
def code_windows(model, tok, texts, n, length, g, layers, batch=8):
    """n random windows of `length` tokens from the texts -> [(tokens, features (T, 3, C))]."""
    rng = random.Random(int(torch.randint(1 << 30, (1,), generator=g)))
    wins = []
    while len(wins) < n:
        ids = tok.encode(rng.choice(texts))
        if len(ids) > length:
            s = rng.randrange(len(ids) - length)
            wins.append(ids[s:s + length])
    rows = []
    for i in range(0, n, batch):
        feats = features(model, torch.tensor(wins[i:i + batch]), layers)
        rows += [(w, torch.stack([f[b] for f in feats], 1).half())
                 for b, w in enumerate(wins[i:i + batch])]
    return rows


class Unrolled:
    """The K/V of every unrolled step side by side, out of place (for autograd)."""

    def __init__(self):
        self.k = self.v = None
        self.length = 0

    def write(self, layer, k, v, start):
        self.k = k if self.k is None else torch.cat([self.k, k], 2)
        self.v = v if self.v is None else torch.cat([self.v, v], 2)
        return self.k, self.v


def unroll(head, g, x, steps):
    """Training-time test: g (B, T, C) fused true features, x (B, T) tokens -> the states of each
    step [(B, T - 1, C)]; step j's entry at t reads step j-1's state at t - 1 and x_{t+1}."""
    T, cache, out = x.shape[1] - 1, Unrolled(), []
    t = torch.arange(T)
    for j in range(1, steps + 1):
        inp = g[:, :-1] if j == 1 else torch.cat([out[-1][:, :1] * 0, out[-1][:, :-1]], 1)
        blocks = [t[None, :] <= t[:, None] - j + 1]  # true entries up to t - j + 1
        blocks += [t[None, :] == t[:, None] - j + i for i in range(2, j + 1)]  # own, one each
        out.append(head(inp, x[:, 1:], cache, torch.cat(blocks, 1), start=0))
    return out


def batch_of(rows, length, answers_only=False):
    """Rows of (tokens, features[, first]) -> x (B, L), features (B, L, 3, C) fp32, valid (B, L);
    answers_only: entries predicting a token before `first` (the chat prompt) count as invalid."""
    B, C = len(rows), rows[0][1].shape[-1]
    x = torch.zeros(B, length, dtype=torch.long)
    f = torch.zeros(B, length, 3, C)
    ok = torch.zeros(B, length, dtype=torch.bool)
    for b, (ids, feats, *first) in enumerate(rows):
        n = min(len(ids), length)
        x[b, :n] = torch.tensor(ids[:n])
        f[b, :n] = feats[:n].float()
        ok[b, :n] = True
        if answers_only and first:  # entry t predicts token t + 2 and is valid where ok[t + 1]
            ok[b, :first[0] - 1] = False
    return x, f, ok


def losses(head, rows, length, steps, answers_only=False):
    """-> (the training loss, top-1 hits (steps,), positions counted) on one batch of rows."""
    x, f, ok = batch_of(rows, length, answers_only)
    g = head.fused(f[:, :, 0], f[:, :, 1], f[:, :, 2])
    with torch.no_grad():  # p_{t+2}: the target's, over the kept ids (from f_{t+1})
        w = head.target[0].lm_head.weight[head.keep]
        logp = torch.log_softmax(f[:, 1:, 2] @ w.T, -1)
    states, loss, hits = unroll(head, g, x, steps), 0.0, torch.zeros(steps)
    mask = ok[:, 1:]
    for j, s in enumerate(states):
        valid = mask.clone()
        valid[:, :j] = False  # step j + 1 needs j earlier states
        logq = torch.log_softmax(head.logits(s), -1)
        ce = -(logp.exp() * logq).sum(-1)
        loss = loss + 0.8 ** j * ce[valid].mean()
        hits[j] = (logq.argmax(-1) == logp.argmax(-1))[valid].float().sum()
    return loss, hits, int(mask.sum())


def accuracy(head, rows, length, depth=5):
    """Held-out top-1 agreement with the target's argmax (over the kept ids) by draft depth, on
    the answers' tokens only for chat rows (the prompts share a system message)."""
    hits, n = torch.zeros(depth), 0
    with torch.no_grad():
        for i in range(0, len(rows), 8):
            h, count = losses(head, rows[i:i + 8], length, depth, answers_only=True)[1:]
            hits += h
            n += count
    return [round(float(a), 4) for a in hits / n]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=6)
    ap.add_argument("--length", type=int, default=160, help="tokens a training sequence")
    ap.add_argument("--code-windows", type=int, default=192)
    ap.add_argument("--answer-tokens", type=int, default=96)
    ap.add_argument("--prompts", type=int, default=256, help="chat prompts answered (of 320)")
    ap.add_argument("--keep", type=int, default=6144, help="K: the draft vocabulary's size")
    ap.add_argument("--unroll", type=int, default=3)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="tiny scale, saved under /tmp")
    ap.add_argument("--out", default=str(WEIGHTS_DIR / "eagle_smollm2.pt"))
    ap.add_argument("--resume", help="a saved head to train further (its vocabulary kept)")
    args, t0 = ap.parse_args(argv), time.time()
    args.argv = sys.argv[1:] if argv is None else list(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    g, layers = torch.Generator().manual_seed(args.seed), (2, 15)
    model, tok = smollm2.load()
    model.requires_grad_(False)
    train_prompts, held_prompts = prompts_for(TOPICS), prompts_for(HELD_TOPICS)
    if args.smoke:
        args.steps, args.code_windows, args.answer_tokens, args.out = 6, 8, 12, "/tmp/es_smoke.pt"
        train_prompts, held_prompts = train_prompts[::40], held_prompts[::20]
    random.Random(args.seed).shuffle(train_prompts)
    train_prompts = train_prompts[:args.prompts]
    texts = [p.read_text(errors="replace") for p in corpus_files()[0]]
    print(f"{len(train_prompts)} chat prompts, {len(held_prompts)} held out; "
          f"{len(texts)} library files", flush=True)
    chat = sample_answers(model, tok, train_prompts, args.answer_tokens, 0.7, g, layers)
    held_chat = sample_answers(model, tok, held_prompts, args.answer_tokens, 0.7, g, layers)
    print(f"answers done {time.time() - t0:.0f}s", flush=True)
    code = code_windows(model, tok, texts, args.code_windows, args.length, g, layers)
    held_code = code_windows(model, tok, [f.decode() for f in heldout_files()],
                             max(4, args.code_windows // 16), args.length, g, layers)
    rows = chat + code
    n_tok = sum(len(r[0]) for r in rows)
    print(f"features done {time.time() - t0:.0f}s: {len(chat)} answers + {len(code)} windows, "
          f"{n_tok} tokens", flush=True)
    counts = torch.bincount(torch.tensor(sum((r[0] for r in rows), [])),
                            minlength=model.config.vocab_size)
    order = sorted(range(len(counts)), key=lambda i: (-int(counts[i]), i))
    keep = torch.tensor(order[:args.keep])
    print(f"kept {len(keep)} ids: {float(counts[keep].sum() / counts.sum()):.4f} of the training "
          "tokens", flush=True)
    head = EagleLlamaHead(model, keep, layers)
    with torch.no_grad():
        head.norm.weight.copy_(model.ln_f.weight)  # with W_K = the target's rows: s = h_N reads f
    if args.resume:  # a second phase on fresh samples: the first's head and draft vocabulary
        ckpt = torch.load(args.resume, weights_only=True)
        head = EagleLlamaHead(model, ckpt["keep"], ckpt["layers"])
        head.load_state_dict({k: v.float() for k, v in ckpt["state_dict"].items()})
        print(f"resumed from {args.resume}: {ckpt['card']}", flush=True)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    order = []
    for step in range(1, args.steps + 1):
        for group in opt.param_groups:  # warmup, then cosine decay to a tenth
            cosine = 0.1 + 0.45 * (1 + math.cos(math.pi * step / args.steps))
            group["lr"] = args.lr * min(1.0, step / 50) * cosine
        if len(order) < args.batch_size:  # epochs in a seeded order
            order += torch.randperm(len(rows), generator=g).tolist()
        batch, order = [rows[i] for i in order[:args.batch_size]], order[args.batch_size:]
        loss, hits, n = losses(head, batch, args.length, args.unroll)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == args.steps:
            print(f"step {step}/{args.steps}  loss {loss.item():.3f}  top-1 by step "
                  + " ".join(f"{h / n:.3f}" for h in hits) + f"  {time.time() - t0:.0f}s",
                  flush=True)
        if step % 100 == 0 or step == args.steps:
            save(head, held_chat, held_code, args, step, len(chat), len(code), n_tok, t0)


def save(head, held_chat, held_code, args, step, answers, windows, n_tok, t0):
    """Measure the held-out accuracy by depth and save the head (fp16) with its card."""
    head.eval()
    head.accuracy = accuracy(head, held_chat, args.length)
    code_accuracy = accuracy(head, held_code, args.length)
    head.train()
    seconds = round(time.time() - t0)
    print(f"step {step}: held-out top-1 by draft depth, chat:", head.accuracy, " library code:",
          code_accuracy, flush=True)
    state = {k: v.half() for k, v in head.state_dict().items() if k != "keep"}  # fp16 on disk
    card = dict(command=" ".join(["python scripts/train_eagle_smollm2.py"] + args.argv), steps=step,
                batch_size=args.batch_size, length=args.length, lr=args.lr, unroll=args.unroll,
                answers=answers, code_windows=windows, tokens=n_tok,
                train_seconds=seconds, code_accuracy=code_accuracy)
    torch.save(dict(state_dict=state, keep=head.keep.int(), layers=head.layers,
                    accuracy=head.accuracy, card=card), args.out)
    print(f"saved {args.out} ({seconds} s)", flush=True)


if __name__ == "__main__":
    main()
