"""Tiny causal transformer policy and the synthetic verifiable task it is trained on.

Task ("digit sum"): the prompt is ``BOS d1 + d2 + ... + dn =`` with ``n = difficulty``
random digits; the correct answer is the single digit ``(d1 + ... + dn) mod 10``.
The policy generates ``gen_len`` tokens; the first one is the answer, the rest must be
``EOS``.  Reward = 1.0 for a correct answer (+ ``format_bonus`` when the tail is all EOS).

Nothing here touches the global torch RNG: parameters are created on the ``meta``
device and initialised from an explicit :class:`torch.Generator`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

DIGITS = 10
PLUS, EQ, BOS, EOS = 10, 11, 12, 13
VOCAB = 14


def prompt_len(difficulty: int) -> int:
    """BOS + n digits + (n-1) '+' + '='."""
    return 2 * difficulty + 1


def make_prompts(n: int, difficulty: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` random prompts (n, prompt_len) and their answers (n,)."""
    digits = torch.randint(0, DIGITS, (n, difficulty), generator=gen)
    cols = [torch.full((n,), BOS, dtype=torch.long)]
    for i in range(difficulty):
        if i:
            cols.append(torch.full((n,), PLUS, dtype=torch.long))
        cols.append(digits[:, i])
    cols.append(torch.full((n,), EQ, dtype=torch.long))
    return torch.stack(cols, dim=1), digits.sum(dim=1) % DIGITS


def reward(completions: torch.Tensor, answers: torch.Tensor, format_bonus: float = 0.0) -> torch.Tensor:
    """Verifiable reward per completion (float32, shape (N,))."""
    r = (completions[:, 0] == answers).float()
    if format_bonus and completions.shape[1] > 1:
        r = r + format_bonus * (completions[:, 1:] == EOS).all(dim=1).float()
    return r


class _Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Policy(nn.Module):
    """Decoder-only transformer: tokens (B, T) -> logits (B, T, VOCAB)."""

    def __init__(self, d_model: int, n_layers: int, n_heads: int, max_len: int):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def build_policy(d_model: int, n_layers: int, n_heads: int, max_len: int,
                 init_gen: torch.Generator | None = None) -> Policy:
    """Allocate a policy without touching the global RNG.

    With ``init_gen`` the parameters get a fresh GPT-style init drawn from it;
    without, they are left uninitialised (caller loads a state_dict).
    """
    with torch.device("meta"):
        model = Policy(d_model, n_layers, n_heads, max_len)
    model = model.to_empty(device="cpu")
    if init_gen is not None:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif p.dim() == 1:  # LayerNorm weight
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, 0.02, generator=init_gen)
    return model
