"""The simulator's performance model: how long a prefill and a decode step take.

This is a *model*, chosen so that layouts differ for the right reasons; it is not ATOM's speed
on any GPU. All times are simulated seconds at ``ATOMSIM_SPEED=1`` (divided by the speed at run
time). sim/README.md states the model and what follows from it.

- One **engine** (an ATOM EngineCore) serves one DP rank. ``--enable-dp-attention`` turns a TPn
  worker into n engines of TP1 (each with its own batch and ``--max-num-seqs``).
- **Prefill** of a batch of prompts is compute-bound: a fixed step overhead plus a time per prompt
  token (the weights' matmuls) plus attention, which grows with the square of each prompt's length;
  tensor parallelism divides the compute by ``tp ** TP_EFFICIENCY`` (sub-linear)::

      prefill_time = PREFILL_STEP_S + (PREFILL_TOKEN_S * sum(n_i) + PREFILL_ATTN_S * sum(n_i ** 2) / 2)
                                      / tp ** TP_EFFICIENCY

  A batch holds at most ``--max-num-batched-tokens`` tokens, so an engine's prefill throughput is
  capped: more prefill engines (DP attention) or more prefill workers raise the cap, a higher TP
  shortens one prompt's wait.
- **Decode** is continuous batching and memory-bound: every step, each running sequence of the
  engine gains one token; a step reads the weights once (fixed), does per-sequence work (sampling,
  the experts a token activates) and reads every running sequence's KV cache (its context so far)::

      decode_step_time = (DECODE_STEP_S + DECODE_SEQ_S * batch + DECODE_KV_TOKEN_S * sum(context_i))
                         / tp ** DECODE_TP_EFFICIENCY

  so a bigger batch gives more tokens/s in total and fewer per user, and long contexts (long
  outputs) make decode the bottleneck: an ISL 8k / OSL 1k workload is prefill-bound (a layout
  with more prefill wins per GPU), an ISL 1k / OSL 8k one decode-bound (more decode wins).
- Sequences beyond ``--max-num-seqs`` (or beyond the engine's KV blocks) wait in the engine's queue.
- The KV transfer between prefill and decode is not modelled: the bytes really move (Mooncake or
  TCP), so it takes what it takes.
"""

from __future__ import annotations

PREFILL_STEP_S = 0.004      # fixed cost of one prefill step (kernel launches, scheduling)
PREFILL_TOKEN_S = 0.001     # per prompt token on one GPU
PREFILL_ATTN_S = 4e-8       # attention: per prompt token per earlier token of its prompt (n ** 2 / 2 pairs)
TP_EFFICIENCY = 0.8         # prefill speed-up of TPn is n ** 0.8 (communication eats the rest)
DECODE_STEP_S = 0.008       # fixed cost of one decode step (weights read once per step)
DECODE_SEQ_S = 0.0005       # added per running sequence in the batch (sampling, the experts its token activates)
DECODE_KV_TOKEN_S = 1e-7    # added per token of KV cache read (every running sequence's context, every step)
DECODE_TP_EFFICIENCY = 0.5  # decode speed-up of TPn is n ** 0.5 (memory-bound, all-reduce per layer)
KV_BLOCKS_PER_ENGINE = 16384  # KV cache blocks of one engine (block_size tokens each)


def tp_speedup(tp: int, efficiency: float = TP_EFFICIENCY) -> float:
    return max(1, tp) ** efficiency


def prefill_time(tokens: int, tp: int, squares: int | None = None) -> float:
    """Simulated seconds for one prefill step over ``tokens`` prompt tokens on a TP``tp`` engine; ``squares`` is
    the sum of each prompt's length squared (attention), ``tokens ** 2`` (one prompt) when not given."""
    sq = max(0, tokens) ** 2 if squares is None else squares
    return PREFILL_STEP_S + (PREFILL_TOKEN_S * max(0, tokens) + PREFILL_ATTN_S * sq / 2) / tp_speedup(tp)


def decode_step_time(batch: int, tp: int, kv_tokens: int = 0) -> float:
    """Simulated seconds for one decode step of ``batch`` running sequences holding ``kv_tokens`` tokens of
    context in all, on a TP``tp`` engine."""
    return ((DECODE_STEP_S + DECODE_SEQ_S * max(1, batch) + DECODE_KV_TOKEN_S * max(0, kv_tokens))
            / tp_speedup(tp, DECODE_TP_EFFICIENCY))


def engines(tp: int, dp: int, dp_attention: bool) -> tuple[int, int]:
    """(engine count, TP of each engine) for a worker's ``-tp``/``-dp``/``--enable-dp-attention``."""
    if dp_attention:
        return tp * dp, 1
    return dp, tp


def prefill_capacity(tp: int, dp: int, dp_attention: bool, batch_tokens: int = 16384) -> float:
    """Prompt tokens/s one worker can prefill when its engines are always busy with full batches."""
    count, engine_tp = engines(tp, dp, dp_attention)
    return count * batch_tokens / prefill_time(batch_tokens, engine_tp, 0)


def decode_capacity(tp: int, dp: int, dp_attention: bool, batch_per_engine: int, context: int = 0) -> float:
    """Output tokens/s one worker gives with ``batch_per_engine`` sequences of ``context`` tokens each running on
    each engine."""
    count, engine_tp = engines(tp, dp, dp_attention)
    return count * batch_per_engine / decode_step_time(batch_per_engine, engine_tp, batch_per_engine * context)
