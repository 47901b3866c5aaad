"""The CPU stand-in for veRL's inference server (vLLM, SGLang): one Ray actor per rollout replica.

It answers the calls veRL makes on a replica's server (`generate`, `sleep`, `wake_up`, `abort_all_requests`,
...) and the ones its hybrid worker's rollout object forwards (`resume`, `release`, `load_weights`), and
samples with an HF model on CPU, token by token, each request seeded from (rollout seed, weight
version, request id). It sleeps and wakes the way veRL's vLLM server does (`vllm_async_server.py`): in
hybrid mode a sleep frees weights and KV cache (level 2: the next weight update restores them), in
colocated mode it keeps a host copy of the weights (level 1), and in standalone mode it skips both.
Every sleep, wake and weight load is logged with the bytes then resident.

It imports neither veRL nor Ray (its arguments are plain values), so its process starts with torch and
transformers alone; its answers carry the fields of veRL's `TokenOutput` that veRL reads.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import torch

HYBRID, COLOCATED, STANDALONE = "hybrid", "colocated", "standalone"  # veRL's RolloutMode values


def request_seed(seed: int, version: int, request_id: str) -> int:
    """The sampling seed of one request: the rollout seed, the weight version and the request id."""
    return zlib.crc32(f"{seed}:{version}:{request_id}".encode()) + seed * 2**32


@dataclass
class Tokens:
    """One request's answer, with the fields of veRL's `TokenOutput` its agent loop reads."""

    token_ids: list[int]
    log_probs: list[float] | None = None
    routed_experts: Any = None
    stop_reason: str | None = "completed"
    num_preempted: int | None = 0
    extra_fields: dict[str, Any] = field(default_factory=dict)


def _mode_value(mode: Any) -> str:
    return getattr(mode, "value", mode)


class CPUServer:
    """One replica's inference server on CPU: an HF model sampled token by token."""

    def __init__(self, model_path: str, seed: int, response_length: int, rollout_mode: str, replica_rank: int,
                 free_cache_engine: bool = True) -> None:
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(1)  # one request at a time, on one thread: the same floating-point order every run
        self.seed, self.response_length, self.replica_rank = seed, response_length, replica_rank
        self.rollout_mode, self.free_cache_engine = rollout_mode, free_cache_engine
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.shapes = {k: (v.shape, v.dtype) for k, v in self.model.named_parameters()}
        self.host: dict[str, torch.Tensor] | None = None  # a level-1 sleep's host copy of the weights
        self.weights, self.kv = True, True  # what is resident (the KV cache is a flag: generate allocates it)
        self.version = 0
        self.log: list[tuple[str, float, int]] = []  # (event, time, weight bytes resident after it)
        self.requests = 0

    def _record(self, event: str) -> None:
        self.log.append((event, time.time(), self.resident_bytes()))

    def resident_bytes(self) -> int:
        """Bytes of the weights resident in the server's model."""
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    def _free(self, keep_host: bool) -> None:
        params = dict(self.model.named_parameters())  # (buffers such as rotary tables stay: no update carries them)
        if keep_host and self.host is None:
            self.host = {k: t.detach().clone() for k, t in params.items()}
        for t in params.values():
            t.data = torch.empty(0, dtype=t.dtype)
        self.weights = False

    def _alloc(self) -> None:
        for name, t in self.model.named_parameters():
            shape, dtype = self.shapes[name]
            t.data = self.host[name] if self.host else torch.zeros(shape, dtype=dtype)
        self.host, self.weights = None, True

    def sleep(self) -> None:
        """veRL's server sleep: hybrid frees weights and KV (level 2), colocated keeps a host copy of the
        weights (level 1), standalone skips it."""
        mode = _mode_value(self.rollout_mode)
        if not self.free_cache_engine or mode == STANDALONE:
            self._record("skip sleep")
            return
        level = 2 if mode == HYBRID else 1
        if self.weights:
            self._free(keep_host=level == 1)
        self.kv = False
        self._record(f"sleep level {level}")

    def wake_up(self) -> None:
        """veRL's server wake: colocated restores weights and KV; hybrid wakes in its weight update; standalone skips."""
        mode = _mode_value(self.rollout_mode)
        if mode != COLOCATED:
            self._record(f"skip wake_up ({mode})")
            return
        self.resume(["weights", "kv_cache"])

    def resume(self, tags: list[str]) -> None:
        """Weights and/or KV cache back (after a level-2 sleep the weights come back empty until loaded)."""
        if "weights" in tags and not self.weights:
            self._alloc()
        if "kv_cache" in tags:
            self.kv = True
        self._record(f"resume {'+'.join(tags)}")

    def release(self) -> None:
        """Free weights and KV cache (the hybrid worker's `BaseRollout.release`)."""
        self._free(keep_host=False)
        self.kv = False
        self._record("release")

    def load_weights(self, weights: dict[str, torch.Tensor], version: int | None) -> None:
        """New weights from the trainer (veRL's weight update), into resident storage."""
        if not self.weights:
            self._alloc()
        result = self.model.load_state_dict({k: v.to(torch.float32) for k, v in weights.items()}, strict=False)
        if result.unexpected_keys:
            raise KeyError(f"cpu server: weights the model does not have: {result.unexpected_keys[:5]}")
        if version is not None:
            self.version = version
        self._record(f"load weights v{self.version}")

    def set_global_steps(self, global_steps: int) -> None:
        """The weight version (veRL's server method)."""
        self.version = global_steps

    def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                 **kwargs: Any) -> Tokens:
        """One request: sample up to the response length, seeded from the request."""
        if not (self.weights and self.kv):
            raise RuntimeError(f"cpu server replica {self.replica_rank}: generate while asleep "
                               f"(weights {self.weights}, kv {self.kv})")
        gen = torch.Generator().manual_seed(request_seed(self.seed, self.version, request_id))
        tokens, logprobs = self._sample(prompt_ids, float(sampling_params.get("temperature", 1.0)), gen)
        self.requests += 1
        return Tokens(token_ids=tokens, log_probs=logprobs if sampling_params.get("logprobs") else None,
                      extra_fields={"global_steps": self.version})

    @torch.no_grad()
    def _sample(self, prompt_ids: list[int], temperature: float, gen: torch.Generator):
        ids, past, tokens, logprobs = torch.tensor([prompt_ids]), None, [], []
        eos = self.model.config.eos_token_id
        for _ in range(self.response_length):
            out = self.model(input_ids=ids if past is None else ids[:, -1:], past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[0, -1].float()
            lp = torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)
            tok = int(torch.multinomial(lp.exp(), 1, generator=gen) if temperature > 0 else lp.argmax())
            tokens.append(tok)
            logprobs.append(lp[tok].item())
            if tok == eos:
                break
            ids = torch.cat([ids, torch.tensor([[tok]])], dim=1)
        return tokens, logprobs

    def events(self) -> list[tuple[str, float, int]]:
        """Every sleep, wake and weight load so far (for tests and measurements)."""
        return list(self.log)

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        return None

    # veRL's server methods with nothing to do here: requests run one at a time and finish.
    abort_all_requests = resume_generation = clear_kv_cache = release_kv_cache = resume_kv_cache = _nothing
    start_profile = stop_profile = wait_for_requests_to_drain = _nothing
