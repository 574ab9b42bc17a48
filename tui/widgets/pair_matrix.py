"""The KV handshake at scale: a prefill x decode matrix, one cell per pair coloured by its stage, and
the failing pairs listed under it (a 16P16D run has 256 pairs: a list would not fit).

A matrix too big for the panel (64P64D: 4,096 pairs) collapses: the failing pairs come first, then
the workers every one of whose pairs lags behind, then the matrix in blocks of pairs (each block
shows its least advanced pair, a failed pair above all), then the counts."""

from __future__ import annotations

from collections.abc import Callable

from rich.style import Style
from rich.text import Text

from ...core.config.text import listed
from ...core.run.events import PairState, RunState
from ..logtext import clean

# A pair's glyph and its colour, by name (the panel's `color`: ok, error, info, muted).
GLYPH = {"waiting": ("○", "muted"), "both_registered": ("◔", "info"),
         "ports_reachable": ("◑", "info"), "transferred": ("●", "ok"), "failed": ("×", "error")}
LEGEND = "○ waiting  ◔ registered  ◑ ports reachable  ● transferred  × failed"


def _short(name: str) -> str:
    """prefill-12 -> P12, decode-3 -> D3."""
    role, _, idx = name.rpartition("-")
    return (role[:1].upper() + idx) if idx.isdigit() else name


# How far a pair got, for "the least advanced pair of a block": failed first, then the earliest stage.
RANK = {"failed": -1, "waiting": 0, "both_registered": 1, "ports_reachable": 2, "transferred": 3}
MAX_ROWS = 24  # prefill rows shown one per prefill; more collapse into blocks
BLOCK_ROWS = 8  # collapsed: at most this many rows of blocks


def pair_matrix(state: RunState, color: Callable[[str], Style], width: int = 56, max_failed: int = 8,
                max_rows: int = MAX_ROWS) -> Text:
    """The matrix as Text; `color(name)` gives the colour of a severity (the panel's component classes)."""
    prefills = list(dict.fromkeys(pr.prefill for pr in state.pairs.values()))
    decodes = list(dict.fromkeys(pr.decode for pr in state.pairs.values()))
    label_w = max((len(_short(p)) for p in prefills), default=2) + 1
    cols = max(1, (width - label_w) // 2)
    if len(prefills) > max_rows or len(decodes) > cols:
        return _collapsed(state, prefills, decodes, color, width, max_failed, max_rows)
    out = Text()
    for start in range(0, len(decodes), cols):  # wrap wide matrices into bands of columns
        band = decodes[start:start + cols]
        out.append(" " * label_w)
        out.append(" ".join(_short(d)[-1] if len(_short(d)) > 1 else _short(d) for d in band), style="dim")
        out.append(f"  {_short(band[0])}-{_short(band[-1])}\n" if len(band) > 1 else "\n", style="dim")
        for p in prefills:
            out.append(f"{_short(p):<{label_w}}", style="bold")
            for i, d in enumerate(band):
                pr = state.pairs.get(f"{p}>{d}")
                glyph, var = GLYPH.get(pr.stage if pr else "waiting", ("?", ""))
                out.append(glyph, style=color(var) if var else "")
                if i < len(band) - 1:
                    out.append(" ")
            out.append("\n")
    out.append(_counts(state), style="dim")
    _failed(out, state, color, max_failed, first=False)
    return out


def _counts(state: RunState) -> str:
    counts: dict[str, int] = {}
    for pr in state.pairs.values():
        counts[pr.stage] = counts.get(pr.stage, 0) + 1
    return _count_words(counts)


def _count_words(counts: dict[str, int]) -> str:
    return " · ".join(f"{n} {st.replace('_', ' ')}" for st, n in sorted(counts.items()))


def _failed(out: Text, state: RunState, color: Callable[[str], Style], max_failed: int, first: bool) -> int:
    """The failing pairs, each with why; returns how many failed."""
    failed = [pr for pr in state.pairs.values() if pr.stage == "failed"]
    err = color("error")
    for i, pr in enumerate(failed[:max_failed]):
        out.append("" if first and i == 0 else "\n")
        out.append(f"× {pr.prefill} → {pr.decode}: ", style=Style(bold=True) + err)
        why = clean(pr.failed, 10_000)
        out.append(why if len(why) <= 240 else why[:239] + "…", style=err)
    if len(failed) > max_failed:
        out.append(f"\n… and {len(failed) - max_failed} more failing pairs", style=err)
    return len(failed)


def _failed_grouped(out: Text, failed: list[PairState], color: Callable[[str], Style], max_groups: int) -> int:
    """The failing pairs grouped by the worker they share (decode or prefill, whichever makes fewer
    groups), most failures first, one line each with the first failure's reason; returns how many."""
    if not failed:
        return 0
    by_d: dict[str, list] = {}
    by_p: dict[str, list] = {}
    for pr in failed:
        by_d.setdefault(pr.decode, []).append(pr)
        by_p.setdefault(pr.prefill, []).append(pr)
    use_d = len(by_d) <= len(by_p)
    groups = sorted((by_d if use_d else by_p).items(), key=lambda kv: -len(kv[1]))
    err = color("error")
    out.append(f"× {len(failed)} failed pair{'s' if len(failed) != 1 else ''}", style=Style(bold=True) + err)
    for worker, prs in groups[:max_groups]:
        others = [pr.prefill if use_d else pr.decode for pr in prs]
        shown = ", ".join(others[:6]) + (f" +{len(others) - 6}" if len(others) > 6 else "")
        out.append(f"\n× {worker} {'←' if use_d else '→'} {shown}: ", style=Style(bold=True) + err)
        why = clean(prs[0].failed, 10_000)
        out.append(why if len(why) <= 160 else why[:159] + "…", style=err)
    if len(groups) > max_groups:
        out.append(f"\n… and {len(groups) - max_groups} more workers with failing pairs", style=err)
    return len(failed)


def _block_size(prefills: list[str], decodes: list[str], width: int) -> tuple[int, int]:
    """Blocks of b x b pairs, b a power of two: the smallest that fits (4 columns a block: glyph, 3
    spaces); and the width of the row labels."""
    b = 1
    while True:
        rows = -(-len(prefills) // b)
        cols = -(-len(decodes) // b)
        label_w = max(len(_label(i, min(i + b, len(prefills)), prefills)) for i in range(0, len(prefills), b)) + 1
        if (rows <= BLOCK_ROWS and label_w + 4 * cols <= max(width, 24)) or b >= max(len(prefills), len(decodes)):
            return b, label_w
        b *= 2


def _label(i: int, j: int, names: list[str]) -> str:
    return _short(names[i]) + (f"-{j - 1}" if j - 1 > i else "")


STAGE_OF = {rank: stage for stage, rank in RANK.items()}


def _collapsed(state: RunState, prefills: list[str], decodes: list[str], color: Callable[[str], Style], width: int,
               max_failed: int, max_rows: int) -> Text:
    # One pass over the pairs (4,096 at 64P64D) for everything the panel says: the counts, the failing
    # pairs, the workers holding the handshake back and each block's least advanced pair.
    b, label_w = _block_size(prefills, decodes, width)
    row_of = {p: i // b for i, p in enumerate(prefills)}
    col_of = {d: j // b for j, d in enumerate(decodes)}
    worst: dict[tuple[int, int], int] = {}  # block -> the lowest rank in it
    members: dict[tuple[int, int], int] = {}  # block -> how many pairs it has (a missing pair is waiting)
    counts: dict[str, int] = {}
    failed: list[PairState] = []
    best = -1  # the furthest rank a (not failed) pair reached
    reach: dict[str, int] = {}  # worker -> the furthest rank of its (not failed) pairs
    rank_of = RANK.get
    for pr in state.pairs.values():
        stage = pr.stage
        counts[stage] = counts.get(stage, 0) + 1
        r = rank_of(stage, 0)
        block = (row_of[pr.prefill], col_of[pr.decode])
        w = worst.get(block)
        if w is None or r < w:
            worst[block] = r
        members[block] = members.get(block, 0) + 1
        if stage == "failed":
            failed.append(pr)
            continue
        if r > best:
            best = r
        for worker in (pr.prefill, pr.decode):
            if reach.get(worker, -2) < r:
                reach[worker] = r
    out = Text()
    n_failed = _failed_grouped(out, failed, color, max_failed)
    lag = [w for w, r in reach.items() if r < best]  # every pair of it is behind the furthest one
    if lag:
        out.append("\n" if n_failed else "")
        shown = listed(lag, 12)
        out.append("held back by ", style="bold")
        out.append(f"{shown}: every pair of {'it' if len(lag) == 1 else 'each'} is behind the others", style="dim")
    out.append("\n" if out.plain else "")
    out.append(f"{len(prefills)}P × {len(decodes)}D" + (f", in blocks of {b}×{b} pairs (the least advanced "
               "of each)" if b > 1 else ""), style="dim")
    out.append("\n" + " " * label_w)
    out.append("".join(f"{_short(decodes[j]):<4}" for j in range(0, len(decodes), b)).rstrip(), style="dim")
    glyphs = {r: GLYPH.get(stage, ("?", "")) for r, stage in STAGE_OF.items()}
    for i in range(0, len(prefills), b):
        out.append("\n")
        out.append(f"{_label(i, min(i + b, len(prefills)), prefills):<{label_w}}", style="bold")
        size_p = min(i + b, len(prefills)) - i
        for j in range(0, len(decodes), b):
            block = (i // b, j // b)
            r = worst.get(block, 0)
            if r > 0 and members.get(block, 0) < size_p * (min(j + b, len(decodes)) - j):
                r = 0  # a pair the state does not have counts as waiting
            glyph, var = glyphs.get(r, ("?", ""))
            out.append(glyph, style=color(var) if var else "")
            if j + b < len(decodes):
                out.append("   ")
    out.append("\n" + _count_words(counts), style="dim")
    return out
