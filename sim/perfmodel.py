"""The simulator's performance model: how long a prefill and a decode step take.

This is a *model*, chosen so that layouts differ for the right reasons; it is not ATOM's speed
on any GPU. All times are simulated seconds at ``ATOMSIM_SPEED=1`` (divided by the speed at run
time). sim/README.md states the model and what follows from it.

- One **engine** (an ATOM EngineCore) serves one DP rank. ``--enable-dp-attention`` turns a TPn
  worker into n engines of TP1 (each with its own batch and ``--max-num-seqs``).
- **Prefill** of a batch of prompts costs a fixed step overhead plus a time per prompt token;
  tensor parallelism divides the per-token time by ``tp ** TP_EFFICIENCY`` (sub-linear). A batch
  holds at most ``--max-num-batched-tokens`` tokens, so an engine's prefill throughput is capped
  at ``tp ** TP_EFFICIENCY / PREFILL_TOKEN_S`` tokens/s: more prefill engines (DP attention) or
  more prefill workers raise the cap, a higher TP shortens one prompt's wait.
- **Decode** is continuous batching: every step, each running sequence of the engine gains one
  token; a step costs ``DECODE_STEP_S + DECODE_SEQ_S * batch`` (divided by
  ``tp ** DECODE_TP_EFFICIENCY``), so a bigger batch gives more tokens/s in total and fewer per
  user.
- Sequences beyond ``--max-num-seqs`` (or beyond the engine's KV blocks) wait in the engine's queue.
- The KV transfer between prefill and decode is not modelled: the bytes really move (Mooncake or
  TCP), so it takes what it takes.
"""

from __future__ import annotations

PREFILL_STEP_S = 0.004      # fixed cost of one prefill step (kernel launches, scheduling)
PREFILL_TOKEN_S = 0.001     # per prompt token on one GPU
TP_EFFICIENCY = 0.8         # prefill speed-up of TPn is n ** 0.8 (communication eats the rest)
DECODE_STEP_S = 0.008       # fixed cost of one decode step (weights read once per step)
DECODE_SEQ_S = 0.0002       # added per running sequence in the batch (its KV read, sampling)
DECODE_TP_EFFICIENCY = 0.5  # decode speed-up of TPn is n ** 0.5 (memory-bound, all-reduce per layer)
KV_BLOCKS_PER_ENGINE = 16384  # KV cache blocks of one engine (block_size tokens each)


def tp_speedup(tp: int, efficiency: float = TP_EFFICIENCY) -> float:
    return max(1, tp) ** efficiency


def prefill_time(tokens: int, tp: int) -> float:
    """Simulated seconds for one prefill step over ``tokens`` prompt tokens on a TP``tp`` engine."""
    return PREFILL_STEP_S + PREFILL_TOKEN_S * max(0, tokens) / tp_speedup(tp)


def decode_step_time(batch: int, tp: int) -> float:
    """Simulated seconds for one decode step of ``batch`` running sequences on a TP``tp`` engine."""
    return (DECODE_STEP_S + DECODE_SEQ_S * max(1, batch)) / tp_speedup(tp, DECODE_TP_EFFICIENCY)


def engines(tp: int, dp: int, dp_attention: bool) -> tuple[int, int]:
    """(engine count, TP of each engine) for a worker's ``-tp``/``-dp``/``--enable-dp-attention``."""
    if dp_attention:
        return tp * dp, 1
    return dp, tp


def prefill_capacity(tp: int, dp: int, dp_attention: bool, batch_tokens: int = 16384) -> float:
    """Prompt tokens/s one worker can prefill when its engines are always busy with full batches."""
    count, engine_tp = engines(tp, dp, dp_attention)
    return count * batch_tokens / prefill_time(batch_tokens, engine_tp)


def decode_capacity(tp: int, dp: int, dp_attention: bool, batch_per_engine: int) -> float:
    """Output tokens/s one worker gives with ``batch_per_engine`` sequences running on each engine."""
    count, engine_tp = engines(tp, dp, dp_attention)
    return count * batch_per_engine / decode_step_time(batch_per_engine, engine_tp)
