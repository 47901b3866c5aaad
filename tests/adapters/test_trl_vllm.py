"""The drop-in TRL trainer with TRL's colocated vLLM engine: the rollout phase wakes it and pushes the
trainer's weights, and puts it to sleep when it ends. No vLLM runs here (it needs a GPU): TRL's real
generation object (`trl.generation.vllm_generation.VLLMGeneration`, its real `sync_weights`) is
built by TRL's real constructor, with only the engine it keeps at `.llm` replaced by a STAND-IN that
has vLLM's `sleep(level)` / `wake_up(tags)` signatures and the attribute path TRL loads weights
through, and that records every call. benchmarks/gpu/trl_vllm.py runs the same path with vLLM."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("trl")
torch = pytest.importorskip("torch")

import trl.trainer.grpo_trainer as grpo_module  # noqa: E402
from trl_support import Granting, folder, trainer  # noqa: E402, F401
from transformers import TrainerCallback  # noqa: E402
from trl.generation.vllm_generation import VLLMGeneration  # noqa: E402

STEPS = 3
VLLM = dict(use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=True,
            vllm_importance_sampling_correction=False)


class StandInLLM:
    """NOT vLLM: a stand-in for `vllm.LLM` with the methods TRL and the adapter call, recording each."""

    def __init__(self, events: list) -> None:
        self.events, self.asleep, self.pushes = events, False, []
        runner = SimpleNamespace(model=SimpleNamespace(load_weights=self.load_weights))
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
            model_runner=runner)))

    def sleep(self, level: int = 1) -> None:
        """vLLM's LLM.sleep(level)."""
        self.events.append(("sleep", level))
        self.asleep = True

    def wake_up(self, tags: list[str] | None = None) -> None:
        """vLLM's LLM.wake_up(tags)."""
        self.events.append(("wake_up", tags))
        self.asleep = False

    def load_weights(self, weights) -> None:
        """What TRL's colocate sync_weights calls, one (name, tensor) at a time."""
        assert not self.asleep, "weights loaded into a sleeping engine"
        if not self.events or self.events[-1] != ("load_weights",):
            self.events.append(("load_weights",))
            self.pushes.append({})
        self.pushes[-1].update({name: t.detach().clone() for name, t in weights})

    def reset_prefix_cache(self) -> None:
        """vLLM's LLM.reset_prefix_cache()."""
        self.events.append(("reset_prefix_cache",))


class StandInGeneration(VLLMGeneration):
    """TRL's VLLMGeneration with the stand-in engine where TRL keeps its LLM (`.llm`), put to sleep once
    built as TRL's `_init_vllm` does; `generate` returns fixed completions and records where the
    trainer's state was."""

    events: list = []

    def _init_vllm(self) -> None:
        self.llm = StandInLLM(self.events)
        if self.enable_sleep_mode:
            self.llm.sleep(level=2)
        self._llm_weights_sleeping = self.enable_sleep_mode

    def generate(self, prompts, images, num_generations, profiler=None):
        assert not self.llm.asleep, "generate on a sleeping engine"
        resident = all(p.numel() > 0 for p in self.model.parameters())
        self.events.append(("generate", resident))
        eos = self.processing_class.eos_token_id
        completions = [[ids[0], ids[-1], eos] for ids in prompts]
        return prompts, completions, [[[0.0]] * len(c) for c in completions], None


class _Weights(TrainerCallback):
    """The trainer's weights after each optimizer step (inside the train phase, resident)."""

    def __init__(self) -> None:
        self.after: list[dict] = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.after.append({k: v.detach().clone() for k, v in model.state_dict().items()})


@pytest.fixture(scope="module")
def run(folder):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grpo_module, "VLLMGeneration", StandInGeneration)
        StandInGeneration.events = events = []
        client = Granting(units=4)
        client.acquire, acquire = (lambda j, p: events.append(("acquire", p)) or acquire(j, p)), client.acquire
        client.release, release = (lambda t: events.append(("release", t.phase)) or release(t)), client.release
        weights = _Weights()
        t = trainer(folder, steps=STEPS, rollmux_job_id="v", rollmux_client=client, callbacks=[weights], config=VLLM)
        first = {k: v.clone() for k, v in t.rollmux.train_state[0].state_dict().items()}  # offloaded by init
        t.train()
    return SimpleNamespace(trainer=t, events=events, first=first, after=weights.after)


def test_the_rollout_phase_wakes_the_engine_pushes_the_weights_and_puts_it_to_sleep(run):
    one = [("acquire", "rollout"), ("wake_up", None), ("load_weights",), ("reset_prefix_cache",),
           ("generate", False), ("sleep", 2), ("release", "rollout"), ("acquire", "train"), ("release", "train"),
           ("acquire", "sync"), ("release", "sync")]
    # init: TRL builds the engine and puts it to sleep; the adapter's offload finds it asleep
    assert run.events == [("acquire", "init"), ("sleep", 2), ("release", "init")] + one * STEPS


def test_each_wake_pushes_the_weights_the_last_train_phase_left(run):
    pushes = run.trainer.rollmux.vllm.llm.pushes
    assert len(pushes) == STEPS
    expected = [run.first] + run.after[:-1]
    names = {n for n, _ in run.trainer.model.named_parameters()}
    for got, want in zip(pushes, expected):
        assert set(got) == names and all(torch.equal(got[n], want[n]) for n in names)


def test_the_switches_are_timed_and_sleep_mode_goes_back_to_trl(run):
    side = run.trainer.rollmux
    assert {k: len(v) for k, v in side.timings.items()} == {"vllm_wake": STEPS, "vllm_push": STEPS,
                                                            "vllm_sleep": STEPS}
    assert side.vllm.generation.enable_sleep_mode and side.vllm.generation._llm_weights_sleeping
    assert side.engine is None and side.host_memory()["rollout"] == 0  # level 2 keeps nothing of the engine
