"""Bad input: thousands of generated recipes and cluster files. Never a traceback, always a ConfigError
whose every issue names a key (or the top level) and says what to change."""

from __future__ import annotations

import shlex
import subprocess

import yaml
from atomdeck.core.config.cluster import parse_cluster
from atomdeck.core.config.errors import ConfigError
from atomdeck.core.config.recipe import parse_recipe
from atomdeck.core.launch.ssh import detached_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

RECIPE_KEYS = ["name", "model", "path", "served_name", "prefill", "decode", "aggregate", "workers", "tp",
               "per_node", "dp_attention", "args", "env", "ports", "router", "policy", "health", "benchmark",
               "concurrencies", "mode", "mooncake", "protocol", "image", "placement", "engine", "max-num-seqs",
               "server-port", "--host", "kv_cache_dtype", "handshake", "extra_ports", "role", "port", "type"]
CLUSTER_KEYS = ["name", "launcher", "login", "host", "nodes", "addr", "gpus", "state", "exclude", "node", "reason",
                "model_dirs", "pattern", "path", "container", "runtime", "ssh", "simulator", "speed", "slurm",
                "partition", "gpus_per_node", "node_ip", "method", "env"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 70000), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["disagg", "aggregate", "tcp", "rdma", "local", "ssh",
                                                           "slurm", "random", "fp8", "IDLE+DRAIN"]))


def trees(keys):
    return st.recursive(scalars, lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(keys), st.text(max_size=8)), children, max_size=6)),
        max_leaves=25)


def documents(keys, required):
    base = st.fixed_dictionaries({k: v for k, v in required.items()})
    return st.one_of(trees(keys), st.builds(lambda b, extra: {**b, **extra}, base,
                                            st.dictionaries(st.sampled_from(keys), trees(keys), max_size=8)))


def _check(parse, doc, text: str | None = None) -> None:
    if text is None:
        try:
            text = yaml.safe_dump(doc, allow_unicode=True)
        except yaml.YAMLError:
            return
    try:
        parse(text, "f.yaml")
    except ConfigError as e:
        assert e.issues
        for issue in e.issues:
            s = str(issue)
            assert s.startswith("f.yaml"), s
            assert issue.message and "Traceback" not in s
            assert issue.path or "(top level)" in s


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(RECIPE_KEYS, {"name": st.just("x"), "model": st.just({"path": "m"})}))
def test_generated_recipes_never_crash(doc):
    _check(parse_recipe, doc)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(CLUSTER_KEYS, {"name": st.just("c"), "launcher": st.sampled_from(["local", "ssh", "slurm"])}))
def test_generated_clusters_never_crash(doc):
    _check(parse_cluster, doc)


flow_keys = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=3),
                                                       st.dictionaries(st.text(max_size=4), c, max_size=2)),
                         max_leaves=5)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flow_keys, st.sampled_from(["", "prefill", "prefill.args", "router.env", "placement", "env"]),
       st.sampled_from([parse_recipe, parse_cluster]))
def test_keys_that_are_lists_or_mappings_never_crash(key, where, parse):
    """YAML allows any node as a key (`? [a, b]`); a Python dict cannot hold a list: never a bare TypeError."""
    flow = yaml.safe_dump(key, default_flow_style=True, width=10_000, allow_unicode=True).strip()
    flow = flow.removesuffix("...").strip()
    indent = "  " * len([p for p in where.split(".") if p])
    nest = "".join(f"{'  ' * i}{p}:\n" for i, p in enumerate(p for p in where.split(".") if p))
    base = "name: x\nmodel: {path: m}\n" if parse is parse_recipe else "name: c\nlauncher: local\n"
    _check(parse, None, base + nest + f"{indent}? {flow}\n{indent}: 1\n")


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_as_a_recipe_file(tmp_path_factory, data):
    from atomdeck.core.config.recipe import load_recipe

    f = tmp_path_factory.mktemp("b") / "r.yaml"
    f.write_bytes(data)
    try:
        load_recipe(f)
    except ConfigError as e:
        assert all(str(i).startswith(str(f)) for i in e.issues)


arg = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)


@settings(max_examples=60, deadline=None)
@given(st.lists(arg, min_size=1, max_size=5), st.from_regex(r"[a-z][a-z0-9 ;$`'\"|&-]{0,12}", fullmatch=True))
def test_ssh_detached_line_runs_exactly_the_argv(tmp_path_factory, args, name):
    """The shell line that starts a process on a node carries every argument through unchanged."""
    d = tmp_path_factory.mktemp("ssh")
    out = d / "argv.txt"
    inner = ["python3", "-c", "import sys; open(sys.argv[1], 'w').write(repr(sys.argv[2:]))", str(out), *args]
    line = detached_command("RUN", name, str(d), str(d / "log"), str(d / "exit"), str(d / "pid"), inner)
    p = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    import time

    for _ in range(400):  # a busy machine: up to 20 s for the detached process to finish
        if (d / "exit").exists():
            break
        time.sleep(0.05)
    assert (d / "exit").read_text().strip() == "0"
    assert out.read_text() == repr(args)
    assert (d / "pid").read_text().strip() == p.stdout.strip()
    assert shlex.quote(name)  # names with metacharacters are fine too
