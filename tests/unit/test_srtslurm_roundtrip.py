"""import -> export -> import is the identity: over generated srt-slurm recipes of both schemas, over each
real recipe, and, for atomdeck's own recipes, export -> import starts the same workers (the catalog's and
atomdeck's default flags are written out as role args)."""

from __future__ import annotations

import string

import pytest
import yaml
from atomdeck.core.config.catalog import load_catalog
from atomdeck.core.config.cluster import parse_cluster
from atomdeck.core.config.paths import catalog_path, recipes_dir
from atomdeck.core.config.recipe import load_recipe
from atomdeck.core.config.srtslurm import import_file, import_text
from atomdeck.core.config.srtslurm_export import export_recipe
from atomdeck.core.design.commands import LaunchContext
from atomdeck.core.design.inventory import Node
from atomdeck.core.design.lint import assess
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.conftest import DATA

FIXTURES = sorted((DATA / "srtslurm").glob("*.yaml"))
FLAGS = ["max-num-seqs", "block-size", "kv_cache_dtype", "gpu-memory-utilization", "enable-dp-attention",
         "no-enable_prefix_caching", "trust-remote-code", "enforce-eager", "max-model-len", "cudagraph-capture-sizes",
         "method", "num-speculative-tokens", "enable-tbo"]
word = st.text(string.ascii_letters + string.digits + "-_./", min_size=1, max_size=12).filter(
    lambda s: s[0] not in "-_" and s not in ("true", "false", "null", "yes", "no", "on", "off"))
scalar = st.one_of(st.booleans(), st.integers(0, 4096), st.sampled_from([0.5, 0.84, 0.85, 1.5]), word,
                   st.lists(st.integers(1, 512), min_size=1, max_size=4))
env_name = st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True)
env = st.dictionaries(env_name, word, max_size=4)


@st.composite
def role(draw):
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    per_node = draw(st.integers(1, 8 // gpus))
    workers = draw(st.integers(1, 4))
    nodes = -(-workers // per_node)
    assume(-(-workers // -(-workers // nodes)) == nodes)
    return {"nodes": nodes, "workers": workers, "gpus": gpus,
            "args": draw(st.dictionaries(st.sampled_from(FLAGS), scalar, max_size=5)), "env": draw(env)}


@st.composite
def srt_recipe(draw):
    schema = draw(st.sampled_from([1, 2]))
    agg = draw(st.booleans())
    roles = {"agg": draw(role())} if agg else {"prefill": draw(role()), "decode": draw(role())}
    local = draw(st.booleans())
    model = {"path": "/shared/models/M" if local else "hf:org/" + draw(word), "container": "rocm/atom:" + draw(word),
             "precision": "bf16"}
    proto = draw(st.sampled_from([None, "rdma", "tcp"]))
    front_args = draw(st.fixed_dictionaries({}, optional={
        "policy": st.sampled_from(["random", "round_robin", "cache_aware", "power_of_two", "prefix_hash"]),
        "log-level": st.sampled_from(["debug", "info", "warn", "error"]),
        "disable-health-check": st.booleans(), "request-timeout-secs": st.integers(1, 9999)}))
    doc: dict = {"name": "gen-" + draw(word), "model": model}
    res: dict = {"gpu_type": "mi355x", "gpus_per_node": 8}
    mode_of = {"prefill": "prefill", "decode": "decode", "agg": "aggregated"}
    if schema == 2:
        doc["schema"] = 2
        doc["resources"] = res
        doc["engine"] = {"type": "atom", **({"mooncake_protocol": proto} if proto else {})}
        doc["roles"] = roles
    else:
        backend: dict = {"type": "atom", **({"mooncake_protocol": proto} if proto else {})}
        for name, r in roles.items():
            res[f"{name}_nodes"], res[f"{name}_workers"], res[f"gpus_per_{name}"] = r["nodes"], r["workers"], r["gpus"]
            if r["env"]:
                backend[f"{mode_of[name]}_environment"] = r["env"]
            if r["args"]:
                backend.setdefault("atom_config", {})[mode_of[name]] = r["args"]
        doc["resources"], doc["backend"] = res, backend
    doc["frontend"] = {"type": "atomesh", "enable_multiple_frontends": False, "args": front_args,
                       "env": draw(env)}
    doc["environment"] = draw(env)
    doc["container_mounts"] = draw(st.dictionaries(st.sampled_from(["/a", "/b/c", "/hf"]),
                                                   st.sampled_from(["/x", "/y/z"]), max_size=2))
    doc["health_check"] = {"max_attempts": draw(st.integers(1, 999)), "interval_seconds": draw(st.integers(1, 30))}
    conc = draw(st.lists(st.integers(1, 4096), min_size=1, max_size=4))
    doc["benchmark"] = {"type": "sa-bench", "isl": draw(st.integers(1, 9000)), "osl": draw(st.integers(1, 9000)),
                        "concurrencies": draw(st.sampled_from([conc, "x".join(map(str, conc))]))}
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(srt_recipe(), st.sampled_from([1, 2]))
def test_import_export_import_is_the_identity(doc, schema):
    first = import_text(yaml.safe_dump(doc, sort_keys=False), "gen.yaml")
    assert first.recipe is not None, [str(n) for n in first.errors]
    out = export_recipe(first.recipe, schema)
    assert not out.errors, [str(n) for n in out.errors]
    again = import_text(out.text("header"), "exported.yaml")
    assert again.recipe == first.recipe, out.text()


@pytest.mark.parametrize("schema", [1, 2])
@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_each_real_recipe_round_trips(path, schema):
    first = import_file(path, "atomesh")
    assert first.recipe is not None
    out = export_recipe(first.recipe, schema)
    assert not out.errors
    assert import_text(out.text(), "exported.yaml").recipe == first.recipe


def _workers(recipe):
    n = sum(spec.nodes_needed() for _, spec in recipe.roles())
    nodes = [Node(name=f"n{i}", addr=f"10.0.0.{i + 1}", states=("IDLE",), source="offline") for i in range(n)]
    a = assess(recipe, parse_cluster("name: c\nlauncher: slurm\n"), nodes, None, frozenset(),
               load_catalog(catalog_path()), LaunchContext())
    assert a.plan is not None
    return [(p.name, p.argv, p.env) for p in a.processes if p.role != "router"]


def _flag_set(argv: list[str]) -> list[tuple[str, ...]]:
    """argv as sorted flag groups (srt-slurm sorts a role's args; atomdeck keeps the catalog's order)."""
    groups: list[list[str]] = []
    for t in argv[3:]:
        if t.startswith("-") and not t.lstrip("-").replace(".", "").isdigit():
            groups.append([t])
        else:
            groups[-1].append(t)
    return sorted(tuple(g) for g in groups)


@pytest.mark.parametrize("name", ["dsv4-fp4-mi355x-1p1d-tp8", "dsv4-fp4-mi355x-2p1d-dpa"])
def test_exporting_atomdecks_own_recipe_starts_the_same_workers(name):
    recipe = load_recipe(recipes_dir() / f"{name}.yaml")
    out = export_recipe(recipe, 2, load_catalog(catalog_path()))
    assert not out.errors
    back = import_text(out.text(), "exported.yaml")
    assert back.recipe is not None and back.recipe.engine_defaults is False
    # the model path is written as hf:/models/... and comes back literally
    assert back.recipe.model.path == recipe.model.path
    mine, theirs = _workers(recipe), _workers(back.recipe)
    assert [n for n, _, _ in mine] == [n for n, _, _ in theirs]
    for (name_, a1, e1), (_, a2, e2) in zip(mine, theirs):
        assert _flag_set(a1) == _flag_set(a2), name_
        assert e1 == e2, name_
