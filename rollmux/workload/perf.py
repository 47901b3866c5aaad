"""Analytic performance model of one RL post-training iteration (docs/workload.md).

Rollout is LLM decoding on H20s: memory-bandwidth bound, each decode step reads
the weight shard plus the KV cache of every live response. Training on H800s is
compute bound. Weight sync sends one bf16 model copy over the slow
inter-cluster link (topology-aware sync, DESIGN §8). The constants below are
calibrated once against the paper's six production profiles (PAPER_PROFILES);
tests/workload/test_workload_catalog.py keeps the model within 25% of each of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# --- hardware (DESIGN §2) ---------------------------------------------------
H20_HBM_BYTES = 96e9
H20_BW = 4.0e12             # HBM bytes/s
H800_FLOPS = 990e12         # dense bf16 FLOP/s
LINK_BYTES_S = 20e9 / 8     # 20 Gb/s between the rollout and training clusters
GPUS_PER_NODE = 8

# The rollout's fixed parts live in core (the elastic-rollout model reads them too).
from rollmux.core.elastic import ENV_LATENCY_S, ROLLOUT_FIXED_S, TURNS  # noqa: E402,F401

# --- calibrated efficiencies --------------------------------------------------
BW_EFF = 0.7                # share of HBM bandwidth a decode step achieves
KV_HBM_SHARE = 0.9          # share of HBM the engine may fill (weights + KV cache)
TP_WEIGHT_SHARE = 0.4       # pick the smallest TP whose weight shard is <= 40% of HBM
STEP_OVERHEAD_S = 0.004     # per decode step: kernel launches, sampling, batch scheduling
MFU_AT_7B = 0.25            # training MFU of a 7B model; larger GEMMs run more efficiently,
MFU_SIZE_EXP = 0.35         # so MFU = MFU_AT_7B * (params / 7e9) ** MFU_SIZE_EXP
TRAIN_FWD_PASSES = 6        # ref + old-logprob forwards, actor forward + recompute + 2x backward
SYNC_FIXED_S = 5.0          # per sync: gather, handshake, engine reload from host cache
PROMPT_TOKENS = 512

# --- multi-turn (agentic) jobs -------------------------------------------------
TOOL_TOKENS = 256           # per turn: tool output appended to the context (not generated)

# --- host DRAM of a suspended job (DESIGN §1 C3, §5a) -----------------------------
# What an offloaded job leaves in each node's host DRAM (see host_gb and docs/workload.md).
H800_HBM_BYTES = 80e9
HOST_GB_PER_NODE = 2048     # DESIGN §2: 2 TiB host DRAM per node
POLICY_BYTES_PER_PARAM = 2  # bf16 policy weights, one copy per model-parallel replica
REF_BYTES_PER_PARAM = 2     # bf16 reference weights, one copy per model-parallel replica
OPTIM_BYTES_PER_PARAM = 12  # fp32 master weights + Adam m + v, sharded over all the job's ranks
GRAD_BYTES_PER_PARAM = 0    # fp32 grad buffer: freed on offload and zeroed on reload (4 if kept)
TRAIN_STATE_HBM_SHARE = 0.5  # training MP: smallest with bf16 weights + fp32 grads + optimizer
                             # shard <= 50% of H800 HBM (the rest: activations)
RANK_RUNTIME_GB = 4.0       # host RSS of one suspended rank process (CUDA context, NCCL, framework)


@dataclass(frozen=True)
class Arch:
    """Architecture numbers the model needs (from the models' config.json)."""

    name: str
    params: float
    layers: int
    kv_heads: int
    head_dim: int
    d_model: int

    @property
    def kv_bytes_per_token(self) -> float:
        """bf16 K and V of one token across all layers."""
        return self.layers * self.kv_heads * self.head_dim * 2 * 2

    @property
    def weight_bytes(self) -> float:
        """bf16 weights."""
        return 2 * self.params


ARCHS = {a.name: a for a in (
    Arch("qwen2.5-3b", 3.09e9, 36, 2, 128, 2048),
    Arch("qwen3-4b", 4.02e9, 36, 8, 128, 2560),
    Arch("qwen2.5-7b", 7.62e9, 28, 4, 128, 3584),
    Arch("qwen3-8b", 8.19e9, 36, 8, 128, 4096),
    Arch("qwen2.5-14b", 14.7e9, 48, 8, 128, 5120),
    Arch("qwen2.5-32b", 32.5e9, 64, 8, 128, 5120),
)}


@dataclass(frozen=True)
class Recipe:
    """One RL job configuration: model, response cap, turns, GPUs and batch."""

    model: str
    cap: int                  # max response tokens
    rollout_gpus: int         # H20
    train_gpus: int           # H800
    batch: int                # responses per iteration (prompts x samples per prompt)
    length_scale: float       # response lengths ~ Exp(length_scale * cap), truncated at cap
    multi_turn: bool = False

    @property
    def arch(self) -> Arch:
        """The model's architecture."""
        return ARCHS[self.model]

    @property
    def context_tokens(self) -> int:
        """Non-generated tokens of one trajectory: prompt plus tool outputs."""
        return PROMPT_TOKENS + (TURNS * TOOL_TOKENS if self.multi_turn else 0)


@dataclass(frozen=True)
class Phases:
    """Per-iteration phase times (s) and host DRAM (GB per node) of one recipe."""

    rollout_median: float
    rollout_max: float
    train: float
    sync: float
    host_rollout_gb: float
    host_train_gb: float


def tensor_parallel(arch: Arch) -> int:
    """TP degree of one rollout engine: smallest power of two that fits the weights."""
    tp = 1
    while arch.weight_bytes / tp > TP_WEIGHT_SHARE * H20_HBM_BYTES:
        tp *= 2
    return tp


def length_moments(scale: float, cap: int) -> tuple[float, float]:
    """E[L] and E[L^2] of response lengths L = min(Exp(scale), cap)."""
    tail = math.exp(-cap / scale)
    return scale * (1 - tail), 2 * scale * scale * (1 - tail * (1 + cap / scale))


def decode_time(r: Recipe, mean_len: float, mean_sq_len: float, longest: float) -> float:
    """Seconds to decode the batch on the rollout GPUs (memory-bandwidth bound)."""
    a = r.arch
    weights_per_gpu = a.weight_bytes / tensor_parallel(a)
    per_gpu = r.batch / r.rollout_gpus          # responses per GPU (TP shards them evenly)
    bw = H20_BW * BW_EFF
    # Every step a response is live, its whole context's KV is read once.
    kv_reads = per_gpu * a.kv_bytes_per_token * (r.context_tokens * mean_len + mean_sq_len / 2)
    # KV capacity caps how many responses decode at once; past it steps serialise.
    kv_capacity = KV_HBM_SHARE * H20_HBM_BYTES - weights_per_gpu
    live_kv = (r.context_tokens + mean_sq_len / (2 * mean_len)) * a.kv_bytes_per_token
    steps = max(longest, per_gpu * mean_len * live_kv / kv_capacity)
    return steps * (STEP_OVERHEAD_S + weights_per_gpu / bw) + kv_reads / bw


def rollout_times(r: Recipe) -> tuple[float, float]:
    """(typical, worst-case) rollout seconds; worst case = every response hits the cap."""
    fixed = ROLLOUT_FIXED_S + (TURNS * ENV_LATENCY_S if r.multi_turn else 0.0)
    scale = r.length_scale * r.cap
    mean_len, mean_sq = length_moments(scale, r.cap)
    # The rollout lasts as long as its longest response: E[max of N] ~ scale * ln N.
    longest = min(float(r.cap), scale * math.log(r.batch))
    typical = fixed + decode_time(r, mean_len, mean_sq, longest)
    worst = fixed + decode_time(r, r.cap, float(r.cap) ** 2, r.cap)
    return typical, max(typical, worst)


def mfu(arch: Arch) -> float:
    """Training model-FLOPs utilisation on H800 (grows mildly with model size)."""
    return min(0.5, MFU_AT_7B * (arch.params / 7e9) ** MFU_SIZE_EXP)


def train_time(r: Recipe) -> float:
    """Seconds of one training step on the typical rollout's tokens (compute bound)."""
    a = r.arch
    mean_len, _ = length_moments(r.length_scale * r.cap, r.cap)
    seq = r.context_tokens + mean_len
    # Forward FLOPs/token: 2*params for the GEMMs + 4*layers*d_model*ctx for attention.
    fwd_per_token = 2 * a.params + 4 * a.layers * a.d_model * (seq / 2)
    flops = TRAIN_FWD_PASSES * fwd_per_token * r.batch * seq
    return flops / (r.train_gpus * H800_FLOPS * mfu(a))


def sync_time(r: Recipe) -> float:
    """Seconds to push one bf16 model copy across the inter-cluster link."""
    return r.arch.weight_bytes / LINK_BYTES_S + SYNC_FIXED_S


def train_model_parallel(arch: Arch, train_gpus: int) -> int:
    """Model-parallel degree of training: smallest power of two (<= a node) whose state fits HBM.

    Per GPU: the bf16 weights and the fp32 grad buffer (6 bytes/param) split over the
    model-parallel group, plus the optimizer's 12 bytes/param split over all the job's GPUs.
    """
    optim = OPTIM_BYTES_PER_PARAM * arch.params / train_gpus
    mp = 1
    while mp < GPUS_PER_NODE and (6 * arch.params / mp + optim
                                  > TRAIN_STATE_HBM_SHARE * H800_HBM_BYTES):
        mp *= 2
    return mp


def host_gb(r: Recipe) -> tuple[float, float]:
    """(rollout, train) host DRAM GB per node that a suspended job keeps resident.

    Training node (Megatron layout, as veRL and ROLL run it: a model-parallel group of
    MP GPUs inside the node, data parallel over the job's other ranks, the distributed
    optimizer). Offload moves each rank's state to pinned host memory:
      policy weights    2 B/param x (8 / MP) replicas per node (bf16, chunked in the MP group)
      reference weights 2 B/param x (8 / MP) replicas per node (bf16, forward only)
      optimizer         12 B/param / train nodes (fp32 master + Adam m + v, sharded over every rank)
      gradients         0 B/param (the fp32 grad buffer is freed on offload, zeroed on reload)
      runtime           4 GB x 8 ranks (each rank's process stays alive: CUDA context, NCCL, framework)
    Rollout node: each engine (TP GPUs) keeps its own bf16 weights, 2 B/param x (8 / TP)
    engines per node (sleep mode: weights to host, KV cache discarded; the weight sync
    writes into these copies), plus the same 4 GB x 8 ranks of runtime.
    E.g. 32B trains with MP 8 on 2 nodes: 65 + 65 + 195 + 32 = 357 GB per node, 5 jobs per
    2 TiB node; 7B (MP 2, 2 nodes): 61 + 61 + 46 + 32 = 200 GB, 10 jobs.
    """
    a = r.arch
    ranks = min(GPUS_PER_NODE, r.train_gpus)
    train_nodes = -(-r.train_gpus // GPUS_PER_NODE)
    replicas = ranks / train_model_parallel(a, r.train_gpus)
    per_replica = (POLICY_BYTES_PER_PARAM + REF_BYTES_PER_PARAM + GRAD_BYTES_PER_PARAM) * a.params
    train = (replicas * per_replica + OPTIM_BYTES_PER_PARAM * a.params / train_nodes) / 1e9
    train += RANK_RUNTIME_GB * ranks
    roll_ranks = min(GPUS_PER_NODE, r.rollout_gpus)
    rollout = roll_ranks / tensor_parallel(a) * a.weight_bytes / 1e9 + RANK_RUNTIME_GB * roll_ranks
    return rollout, train


def jobs_per_node(r: Recipe, node_gb: float = HOST_GB_PER_NODE) -> tuple[int, int]:
    """(rollout, train): how many such jobs stay resident on one node of `node_gb` host DRAM."""
    rollout, train = host_gb(r)
    return int(node_gb // rollout), int(node_gb // train)


def phases(r: Recipe) -> Phases:
    """All modelled per-iteration numbers of a recipe."""
    typical, worst = rollout_times(r)
    h_roll, h_train = host_gb(r)
    return Phases(typical, worst, train_time(r), sync_time(r), h_roll, h_train)


# The paper's production profiles (DESIGN §7): (model, cap) -> (rollout s, train s).
PAPER_PROFILES: dict[tuple[str, int], tuple[float, float]] = {
    ("qwen2.5-3b", 4096): (79.0, 47.0),
    ("qwen2.5-7b", 8192): (134.0, 113.0),
    ("qwen2.5-14b", 8192): (239.0, 197.0),
    ("qwen2.5-32b", 8192): (268.0, 362.0),
    ("qwen3-4b", 32768): (734.0, 465.0),
    ("qwen3-8b", 32768): (888.0, 560.0),
}
