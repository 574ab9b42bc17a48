"""The workload: what to send (random prompts of ISL words or a JSONL dataset, OSL output tokens) and how
(a concurrency sweep, an optional request rate, warm-up requests, a fixed seed).

Random prompts are built from plain lowercase words separated by spaces: a word-level tokenizer (the
simulator's) counts one token per word, and subword tokenizers count about one per common word. The
server's `usage` is authoritative for the figures either way.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import MeasureInputError

# Common English and serving words, each one token for a word tokenizer (the simulator's vocabulary too).
WORDS = (
    "the of and to in is that for it as with was on be by at this are from or an but not which all one have "
    "they you were her his their has more will if can when there so been some what into other than then its "
    "only two these may new also time first could any like over such our way even most made after many before "
    "well must through back years where much your cache block prefill decode token kernel tensor rank node port "
    "router engine mooncake transfer handshake latency throughput batch stream graph expert layer attention "
    "memory queue request worker barrier signal model weight shard quant scale vector matrix sample river stone "
    "cloud light north quiet amber garden winter copper silver harbor lantern"
).split()

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
DEFAULT_ISL = 1024
DEFAULT_OSL = 128
DEFAULT_CONCURRENCIES = (1, 4, 16, 64)
DEFAULT_NUM_PROMPTS = 64


@dataclass(frozen=True)
class Prompt:
    """One request's input: the text and the input length it was built for (None for a dataset line)."""

    text: str
    words: int | None = None
    max_tokens: int | None = None  # a dataset line may ask its own output length


@dataclass
class Workload:
    isl: int = DEFAULT_ISL
    osl: int = DEFAULT_OSL
    concurrencies: list[int] = field(default_factory=lambda: list(DEFAULT_CONCURRENCIES))
    num_prompts: int = DEFAULT_NUM_PROMPTS
    random_range_ratio: float = 1.0
    seed: int = 0
    dataset: str | None = None
    request_rate: float | None = None  # requests/s (Poisson arrivals), None = as fast as the concurrency allows
    warmup: int = 2
    endpoint: str = "completions"
    goodput: dict[str, float] | None = None  # SLO limits in ms (stats.parse_slo): the steps report their goodput

    def validate(self) -> None:
        """Raise MeasureInputError naming the option to change."""
        if self.isl < 1:
            raise MeasureInputError(f"--isl must be a positive integer, got {self.isl}")
        if self.osl < 1:
            raise MeasureInputError(f"--osl must be a positive integer, got {self.osl}")
        if not self.concurrencies or any(not isinstance(c, int) or c < 1 for c in self.concurrencies):
            raise MeasureInputError(f"--concurrency must be positive integers, got {self.concurrencies}")
        if self.num_prompts < 1:
            raise MeasureInputError(f"--num-prompts must be a positive integer, got {self.num_prompts}")
        if not 0.0 <= self.random_range_ratio <= 1.0:
            raise MeasureInputError(f"--random-range-ratio must be in [0, 1], got {self.random_range_ratio}")
        if self.request_rate is not None and not self.request_rate > 0:
            raise MeasureInputError(f"--request-rate must be positive, got {self.request_rate}")
        if self.warmup < 0:
            raise MeasureInputError(f"--warmup must be 0 or more, got {self.warmup}")
        if self.endpoint not in ENDPOINTS:
            raise MeasureInputError(f"--endpoint must be one of {', '.join(ENDPOINTS)}, got {self.endpoint!r}")

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def key(self) -> str:
        """What makes two runs' numbers comparable: the same inputs and outputs asked."""
        source = f"dataset {Path(self.dataset).name}" if self.dataset else f"ISL {self.isl}"
        return f"{source} OSL {self.osl}"


def parse_concurrencies(text: str) -> list[int]:
    """'1,4,16,64' -> [1, 4, 16, 64]; anything but positive integers is a MeasureInputError."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise MeasureInputError(f"--concurrency must be a comma-separated list of positive integers "
                                    f"(e.g. 1,4,16,64); {part!r} in {text!r} is not one")
        out.append(int(part))
    return out


def random_prompts(n: int, isl: int, range_ratio: float, rng: random.Random) -> list[Prompt]:
    """n prompts of ISL words each, or uniformly in [ISL x ratio, ISL] words (InferenceX's
    `--random-range-ratio`: 1.0 means every prompt has exactly ISL)."""
    low = max(1, int(isl * range_ratio))
    out = []
    for _ in range(n):
        words = rng.randint(low, isl) if low < isl else isl
        out.append(Prompt(" ".join(rng.choices(WORDS, k=words)), words))
    return out


def load_dataset(path: str) -> list[Prompt]:
    """Prompts from a JSONL file: one object per line with "prompt" or "text" (aiperf's single-turn
    field), optionally "max_tokens"/"output_length". Raises MeasureInputError with the line at fault."""
    p = Path(path)
    if not p.is_file():
        raise MeasureInputError(f"--dataset {path}: no such file")
    out = []
    try:
        lines = p.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise MeasureInputError(f"--dataset {path}: cannot read it as text ({e})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise MeasureInputError(f"--dataset {path}: line {n} is not JSON ({e}); the file must be JSONL, "
                                    'one object like {"prompt": "..."} per line') from None
        text = obj.get("prompt", obj.get("text")) if isinstance(obj, dict) else None
        if not isinstance(text, str) or not text:
            raise MeasureInputError(f'--dataset {path}: line {n} has no "prompt" (or "text") string')
        mt = obj.get("max_tokens", obj.get("output_length"))
        out.append(Prompt(text, None, int(mt) if isinstance(mt, int) and mt > 0 else None))
    if not out:
        raise MeasureInputError(f"--dataset {path}: the file has no prompts")
    return out


def write_dataset(path: str | Path, prompts: list[Prompt], osl: int | None = None) -> None:
    """Save prompts as JSONL in the single-turn shape both atomdeck and aiperf read ({"text": ...})."""
    with open(path, "w") as f:
        for pr in prompts:
            obj: dict = {"text": pr.text}
            if osl:
                obj["output_length"] = osl
            f.write(json.dumps(obj) + "\n")


def step_prompts(w: Workload, rng: random.Random, base: list[Prompt] | None) -> list[Prompt]:
    """The prompts of one step: num_prompts random ones, or num_prompts lines of the dataset (cycled)."""
    if base is None:
        return random_prompts(w.num_prompts, w.isl, w.random_range_ratio, rng)
    return [base[i % len(base)] for i in range(w.num_prompts)]
