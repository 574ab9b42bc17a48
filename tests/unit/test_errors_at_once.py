"""Errors all at once, in words a person understands (issue 16)."""

from __future__ import annotations

import pytest
from atomdeck.core.config.cluster import parse_cluster
from atomdeck.core.config.errors import ConfigError
from atomdeck.core.config.recipe import parse_recipe
from atomdeck.core.design.lint import assess

from .helpers import LAB, lab_assess, lab_inventory, recipe


def issues(text: str) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_recipe(text, "r.yaml")
    return [str(i) for i in e.value.issues]


SEVERAL = """\
name: x
nodes: 3
model: {path: m}
prefill:
  tp: eight
  workers: -1
  args: {model: foo}
decode: {workers: 0}
router: {policy: x, args: {port: 9}}
"""


def test_a_recipe_with_several_problems_reports_all_of_them_in_one_pass():
    out = issues(SEVERAL)
    keys = [line.split(": ")[1] for line in out]
    # shape problems and the rules across keys together, in file order
    assert keys == ["nodes", "prefill.tp", "prefill.workers", "prefill.args.model", "decode.workers",
                    "router.policy", "router.args.port"], out
    assert "r.yaml:7: prefill.args.model: is managed by atomdeck; remove it (set model.path instead)" in out


def test_a_key_with_a_wrong_value_is_not_reported_twice():
    out = issues("name: x\nmodel: {path: m}\nprefill: {workers: many}\n")
    assert out == ["r.yaml:3: prefill.workers: must be a whole number, got 'many'"]


def test_no_did_you_mean_when_nothing_is_close():
    (nodes,) = issues("name: x\nmodel: {path: m}\nnodes: [a, b]\n")
    assert "did you mean" not in nodes and "mode" not in nodes.split("remove it")[1].split("placement")[0]
    assert "a recipe names no nodes" in nodes and "placement.prefill" in nodes
    (close,) = issues("name: x\nmodel: {path: m}\nrouter: {polcy: random}\n")
    assert close.endswith("did you mean 'policy'?")


ISSUE_EXAMPLE = """\
name: x
model:
  path: m
prefill:
  tp: 8
  workers: 1
 decode:
  tp: 8
"""


def test_yaml_indentation_error_in_plain_words_with_the_line():
    (out,) = issues(ISSUE_EXAMPLE)
    assert out.startswith("r.yaml:7: ")
    assert "`decode:` (line 7) is indented by 1 space: more than `prefill:` (line 4" in out
    assert "keys at the same level must line up" in out


@pytest.mark.parametrize("text,words", [
    ("name: x\nprefill:\n\ttp: 8\n", "a tab is used for indenting; YAML allows only spaces"),
    ('name: "x\nmodel: {path: m}\n', "a quoted text starting on line 1 is never closed"),
    ("name: x\nmodel: {path: m\nprefill: {}\n", "the `{` opened on line 2 is not closed with `}`"),
    ("name: x\nmodel: path: m\n", "line 2 has a second `key:` after a value"),
    ("name: x\nprefill:\n  tp: 8\n   workers: 2\n", "`workers:` (line 4) is indented by 1 space more than `tp:`"),
])
def test_other_yaml_syntax_errors_in_plain_words(text, words):
    (out,) = issues(text)
    assert words in out, out


def test_an_exclusion_rule_for_a_node_the_cluster_lacks_is_a_warning():
    typo = LAB.replace("mia1-p01-g37", "mia1-p01-g73")
    a = assess(recipe(), parse_cluster(typo), lab_inventory())
    (f,) = [f for f in a.findings if f.rule == "exclude-unknown"]
    assert f.severity == "warning" and "'mia1-p01-g73' matches no node" in f.message
    assert f.key == "cluster exclude[0].node" and f.fix == "did you mean mia1-p01-g37?"
    assert not [f for f in lab_assess().findings if f.rule == "exclude-unknown"]  # the right name: quiet


def test_pick_from_names_only_usable_nodes_and_guesses_only_when_close():
    a = lab_assess(nodes=["mia1-p01-g99", "mia1-p01-g02"])
    (f,) = [f for f in a.findings if f.rule == "node-unknown"]
    usable = {n.name for n in lab_inventory() if n.name != "mia1-p01-g37" and "DRAIN" not in n.state.upper()
              and "DOWN" not in n.state.upper()}
    listed = set(f.fix.split("usable nodes: ")[1].split(", "))
    assert listed <= usable and "mia1-p01-g37" not in f.fix
    far = lab_assess(nodes=["zzz", "mia1-p01-g02"])
    assert "did you mean" not in next(f.fix for f in far.findings if f.rule == "node-unknown")
