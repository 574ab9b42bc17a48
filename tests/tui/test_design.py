"""core/design.py: the console's choices, handed to core exactly as the CLI hands them."""

from __future__ import annotations

import asyncio

from atomdeck.core.design.draft import Design, apply_edits
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run.inventory import fetch_inventory


def _ws(recipe="demo-1p1d"):
    ws = load_workspace(recipe, "local")
    ws.inventory, ws.inventory_note = asyncio.run(fetch_inventory(ws.cluster))
    return ws


def test_auto_design_is_the_cli_default():
    ws = _ws()
    d = Design(ws.recipe)
    a = d.assess(ws)
    assert a.selection.prefill == ("demo-n01",) and a.selection.decode == ("demo-n02",)
    assert [p.argv for p in a.processes] == [p.argv for p in ws.assess().processes]


def test_toggle_keeps_rank_order_and_auto_pick_clears():
    d = Design(_ws().recipe).toggle("demo-n03").toggle("demo-n01")
    assert d.nodes == ("demo-n03", "demo-n01")
    assert d.toggle("demo-n03").nodes == ("demo-n01",)
    assert d.auto_pick().auto


def test_assign_swaps_within_roles():
    ws = _ws("demo-2p1d")
    d = Design(ws.recipe)
    a = d.assess(ws)
    d2 = d.assign("demo-n01", "decode", a.selection)  # auto pick becomes explicit, n01 swapped into decode
    assert d2.nodes == ("demo-n03", "demo-n02", "demo-n01")
    sel = d2.assess(ws).selection
    assert sel.decode == ("demo-n01",) and set(sel.prefill) == {"demo-n02", "demo-n03"}
    assert d2.assign("demo-n01", "decode", sel) == d2  # already there


def test_override_picks_and_withdrawal_unpicks():
    ws = _ws()
    d = Design(ws.recipe, ("demo-n01",)).override("demo-n05")
    assert d.nodes == ("demo-n01", "demo-n05") and d.overrides == {"demo-n05"}
    sev = {f.rule: f.severity for f in d.assess(ws).findings}
    assert sev["node-unhealthy"] == "warning"
    back = d.override("demo-n05", on=False)
    assert back.nodes == ("demo-n01",) and not back.overrides


def test_refused_edit_is_retried_after_the_one_it_needs():
    r = _ws().recipe
    r2, issues = apply_edits(r, {"mode": "aggregate"})
    assert r2.mode == "disagg" and "aggregate.workers" in str(issues["mode"][0])
    r3, issues = apply_edits(r, {"mode": "aggregate", "aggregate.workers": "2"})
    assert r3.mode == "aggregate" and r3.aggregate.workers == 2 and not issues


def test_bad_value_keeps_the_last_good_recipe():
    r = _ws().recipe
    r2, issues = apply_edits(r, {"prefill.workers": "two"})
    assert r2 == r and issues["prefill.workers"][0].path == "prefill.workers"
