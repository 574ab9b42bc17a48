"""Save recipe keeps the user's comments, key order and quoting (issue 16)."""

from __future__ import annotations

from atomdeck.core.config.recipe import parse_recipe
from atomdeck.core.config.roundtrip import recipe_yaml
from atomdeck.core.design.edit import set_field

ORIGINAL = """\
# my 2P1D, tuned on mia1 (do not lose this note)
name: mine
description: 'single-quoted on purpose'
model:
  path: "deepseek-ai/DeepSeek-V4-Pro"   # the served name
prefill:
  workers: 2    # two prefills
  tp: 8
  args: {max-num-batched-tokens: 16384, enforce-eager: true}
decode:
  tp: 8
  env:
    ATOM_LOG_LEVEL: INFO
    FLAG: 1
router:
  policy: round_robin
"""


def test_an_edit_changes_only_its_value_and_keeps_the_rest_as_written():
    recipe = parse_recipe(ORIGINAL)
    edited = set_field(set_field(recipe, "prefill.workers", 3), "router.policy", "random")
    out = recipe_yaml(edited, ORIGINAL)
    want = ORIGINAL.replace("workers: 2    # two prefills", "workers: 3    # two prefills") \
        .replace("policy: round_robin", "policy: random")
    assert out == want
    assert parse_recipe(out) == edited


def test_an_unchanged_recipe_is_written_back_byte_for_byte():
    assert recipe_yaml(parse_recipe(ORIGINAL), ORIGINAL) == ORIGINAL


def test_added_and_removed_keys():
    recipe = parse_recipe(ORIGINAL)
    edited = set_field(recipe, "decode.workers", 2)
    edited = set_field(edited, "prefill.args", {"max-num-batched-tokens": 16384})
    out = recipe_yaml(edited, ORIGINAL)
    assert "# my 2P1D, tuned on mia1 (do not lose this note)" in out and "# two prefills" in out
    assert "enforce-eager" not in out
    assert "  workers: 2\n" in out.split("decode:")[1]
    assert parse_recipe(out) == edited


def test_without_an_original_the_recipe_is_rendered_fresh():
    recipe = parse_recipe(ORIGINAL)
    assert parse_recipe(recipe_yaml(recipe, None)) == recipe
