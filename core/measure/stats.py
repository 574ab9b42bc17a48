"""Statistics of one concurrency step, with the keys vLLM's `bench serve` and InferenceX write.

TTFT, TPOT, ITL and E2EL are in milliseconds; TPOT = (e2e - TTFT) / (output tokens - 1) per request;
ITL is every gap between streamed tokens of every request. Percentiles interpolate linearly between
order statistics (numpy's default), so the numbers match tools built on numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

METRICS = ("ttft", "tpot", "itl", "e2el")
PERCENTILES = (90, 99)


@dataclass
class RequestRecord:
    """One request as the client saw it (times in seconds from the step's start)."""

    index: int
    start: float
    success: bool = False
    error: str = ""
    prompt_words: int | None = None     # the length the prompt was built for (random prompts)
    prompt_tokens: int = 0              # the server's usage when given, else prompt_words
    output_tokens: int = 0              # the server's usage when given, else streamed chunks with text
    chunks: int = 0                     # streamed chunks that carried text
    max_tokens: int = 0                 # what was asked
    usage: bool = False                 # the counts came from the server's usage
    ttft: float = 0.0
    e2el: float = 0.0
    itl: list[float] = field(default_factory=list)

    @property
    def short(self) -> bool:
        """Completed with fewer output tokens than asked (the server stopped early)."""
        return self.success and self.output_tokens < self.max_tokens

    @property
    def tpot(self) -> float | None:
        if not self.success or self.output_tokens < 2:
            return None
        return (self.e2el - self.ttft) / (self.output_tokens - 1)

    def to_json(self) -> dict:
        d = dict(self.__dict__)  # flat fields: cheaper than asdict() over thousands of records
        d["itl"] = list(self.itl)
        d["short"] = self.short
        d["tpot"] = self.tpot
        return d

    @staticmethod
    def from_json(d: dict) -> RequestRecord:
        d = {k: v for k, v in d.items() if k not in ("short", "tpot")}
        return RequestRecord(**d)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation; 0.0 for no values (as vLLM reports)."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def std(values: Sequence[float]) -> float:
    """Population standard deviation (numpy's default)."""
    if not values:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def distribution(name: str, values_s: Sequence[float]) -> dict[str, float]:
    """mean_/median_/std_/p90_/p99_ of one metric, seconds in, milliseconds out."""
    ms = [v * 1000.0 for v in values_s]
    out = {f"mean_{name}_ms": mean(ms), f"median_{name}_ms": percentile(ms, 50), f"std_{name}_ms": std(ms)}
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = percentile(ms, p)
    return out


@dataclass(frozen=True)
class Gpus:
    """The layout's GPUs, from the plan (aggregate workers count as both prefill and decode: 0/0 split)."""

    total: int
    prefill: int = 0
    decode: int = 0

    def to_json(self) -> dict:
        return {"total_gpus": self.total, "prefill_gpus": self.prefill, "decode_gpus": self.decode}


# Goodput SLO keys as vLLM's `bench serve --goodput` (ttft, tpot, e2el) and aiperf's `--goodput`
# (time_to_first_token, inter_token_latency, request_latency) spell them, plus the *_ms names of the result keys;
# every value is in milliseconds in all three. Either separator: "ttft:500 tpot:20" or "ttft_ms:500,tpot_ms:20".
SLO_KEYS = {"ttft": "ttft", "ttft_ms": "ttft", "time_to_first_token": "ttft",
            "tpot": "tpot", "tpot_ms": "tpot", "inter_token_latency": "tpot",
            "e2el": "e2el", "e2el_ms": "e2el", "request_latency": "e2el"}


def parse_slo(text: str, option: str = "--goodput") -> dict[str, float]:
    """'ttft_ms:500,tpot_ms:20' (or vLLM's 'ttft:500 tpot:20', aiperf's 'time_to_first_token:500') -> {"ttft": 500.0,
    "tpot": 20.0}, milliseconds. ValueError naming the option and the part at fault."""
    out: dict[str, float] = {}
    for part in str(text).replace(",", " ").split():
        key, sep, value = part.partition(":")
        if not sep or key.strip().lower() not in SLO_KEYS:
            raise ValueError(f"{option}: {part!r} is not KEY:MILLISECONDS with KEY one of ttft_ms, tpot_ms, e2el_ms "
                             f"(vLLM's ttft/tpot/e2el and aiperf's time_to_first_token/inter_token_latency/"
                             f"request_latency too), e.g. {option} ttft_ms:500,tpot_ms:20")
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if not ms > 0:
            raise ValueError(f"{option}: {part!r}: the limit must be a positive number of milliseconds")
        out[SLO_KEYS[key.strip().lower()]] = ms
    if not out:
        raise ValueError(f"{option}: give at least one KEY:MILLISECONDS, e.g. {option} ttft_ms:500,tpot_ms:20")
    return out


def slo_text(slo: dict[str, float]) -> str:
    return ",".join(f"{k}_ms:{v:g}" for k, v in slo.items())


def good(r: RequestRecord, slo: dict[str, float]) -> bool:
    """A completed request within every limit (vLLM's goodput: TPOT of a one-token output is 0)."""
    if not r.success:
        return False
    values = {"ttft": r.ttft * 1000.0, "tpot": (r.tpot or 0.0) * 1000.0, "e2el": r.e2el * 1000.0}
    return all(values[k] <= limit for k, limit in slo.items())


def per_gpu(out: dict, gpus: Gpus) -> None:
    """The per-GPU figures under both definitions in use for disaggregated layouts: srt-slurm's (output / all GPUs:
    `output_throughput_per_gpu`) and InferenceX's (output per decode GPU, input per prefill GPU, total per all GPUs).
    An aggregated layout (no split) divides everything by all its GPUs."""
    total = gpus.total
    split = gpus.prefill > 0 and gpus.decode > 0
    out["output_throughput_per_gpu"] = out["output_throughput"] / total if total else 0.0
    out["total_token_throughput_per_gpu"] = out["total_token_throughput"] / total if total else 0.0
    dec = gpus.decode if split else total
    pre = gpus.prefill if split else total
    inp = out.get("input_throughput", 0.0)
    out["output_throughput_per_decode_gpu"] = out["output_throughput"] / dec if dec else 0.0
    out["input_throughput_per_prefill_gpu"] = inp / pre if pre else 0.0


def summarize(concurrency: int, records: Sequence[RequestRecord], duration: float, gpus: Gpus | None = None,
              request_rate: float | None = None, slo: dict[str, float] | None = None) -> dict:
    """One step's result object (vLLM/InferenceX keys, plus short/errors and the per-GPU figures; with `slo`, the
    goodput: completed requests a second within every limit, as vLLM's `request_goodput`)."""
    done = [r for r in records if r.success]
    failed = [r for r in records if not r.success]
    total_in = sum(r.prompt_tokens for r in done)
    total_out = sum(r.output_tokens for r in done)
    dur = duration if duration > 0 else float("nan")
    out: dict = {
        "max_concurrency": concurrency,
        "request_rate": request_rate if request_rate is not None else "inf",
        "num_prompts": len(records),
        "completed": len(done),
        "failed": len(failed),
        "short": sum(r.short for r in done),
        "duration": duration,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / dur if duration > 0 else 0.0,
        "output_throughput": total_out / dur if duration > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / dur if duration > 0 else 0.0,
        "input_throughput": total_in / dur if duration > 0 else 0.0,
    }
    out.update(distribution("ttft", [r.ttft for r in done]))
    out.update(distribution("tpot", [t for r in done if (t := r.tpot) is not None]))
    out.update(distribution("itl", [g for r in done for g in r.itl]))
    out.update(distribution("e2el", [r.e2el for r in done]))
    # interactivity (tok/s per user) = 1000 / TPOT at each percentile: p90's is what the slowest tenth of users get
    out["interactivity"] = 1000.0 / out["median_tpot_ms"] if out["median_tpot_ms"] > 0 else 0.0
    for p in ("mean", "median", *(f"p{q}" for q in PERCENTILES)):
        tpot = out[f"{p}_tpot_ms"]
        out[f"{p}_interactivity"] = 1000.0 / tpot if tpot > 0 else 0.0
    if slo:
        ok = sum(good(r, slo) for r in done)
        out["goodput_slo"] = dict(slo)
        out["good_requests"] = ok
        out["request_goodput"] = ok / dur if duration > 0 else 0.0
    if gpus is not None:
        out.update(gpus.to_json())
        per_gpu(out, gpus)
    errors: dict[str, int] = {}
    for r in failed:
        errors[r.error] = errors.get(r.error, 0) + 1
    out["errors"] = errors
    return out
