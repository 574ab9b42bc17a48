"""srt-slurm import: every key mapped or reported, refusals by name and line; the import/export verbs'
output and exit codes (README "The headless CLI")."""

from __future__ import annotations

import json

import pytest
import yaml
from atomdeck.core.cli.main import main
from atomdeck.core.config.errors import ConfigError
from atomdeck.core.config.recipe import load_recipe
from atomdeck.core.config.srtslurm import import_text

from tests.conftest import DATA

BASE = """\
schema: 2
name: t
model: {path: "hf:Qwen/Qwen3-0.6B", container: rocm/atom:latest, precision: bf16}
resources: {gpu_type: mi355x, gpus_per_node: 8}
engine: {type: atom, mooncake_protocol: tcp}
frontend: {type: atomesh, enable_multiple_frontends: false}
roles:
  prefill:
    nodes: 1
    workers: 1
    gpus: 8
    args: {max-num-seqs: 8}
  decode:
    nodes: 1
    workers: 1
    gpus: 8
"""


def refused(text: str, frontend=None) -> list:
    im = import_text(text, "r.yaml", frontend)
    assert im.recipe is None
    return im.errors


def test_a_plain_recipe_imports():
    im = import_text(BASE, "r.yaml")
    r = im.recipe
    assert r is not None and r.engine_defaults is False and r.mode == "disagg"
    assert r.model.path == "Qwen/Qwen3-0.6B" and r.image == "rocm/atom:latest"
    assert (r.prefill.tp, r.decode.tp, r.prefill.args) == (8, 8, {"max-num-seqs": 8})
    assert r.router.policy == "cache_aware"  # AToMesh's default: srt-slurm passes no --policy
    assert r.health.worker_timeout_s == 1800  # srt-slurm's default health_check: 180 x 10 s


@pytest.mark.parametrize("extra, key, line, words", [
    ("surprise: 1\n", "surprise", 17, "unknown srt-slurm key"),
    ("setup_script: s.sh\n", "setup_script", 17, "setup script"),
    ("dynamo: {install: false}\n", "dynamo", 17, "Dynamo"),
    ("benchmark: {type: sa-bench, sweep: {parameters: {isl: [1, 2]}}}\n", "benchmark.sweep", 17, "one deployment"),
    ("benchmark: {type: sa-bench, num_shots: 5}\n", "benchmark.num_shots", 17, "no such setting"),
    ("resources2: {}\n", "resources2", 17, "unknown"),
])
def test_keys_atomdeck_cannot_carry_are_refused_by_name_and_line(extra, key, line, words):
    (err,) = refused(BASE + extra)
    assert (err.key, err.line) == (key, line) and words in err.message


@pytest.mark.parametrize("role_extra, key, words", [
    ("      server-port: 9000\n", "roles.decode.args.server-port", "managed"),
    ("      tensor_parallel_size: 8\n", "roles.decode.args.tensor_parallel_size", "managed"),
    ("      extra-kv-connectors: x\n", "roles.decode.args.extra-kv-connectors", "Mooncake"),
    ("      nested: {a: 1}\n", "roles.decode.args.nested", "mapping"),
])
def test_role_args_srt_slurm_manages_are_refused(role_extra, key, words):
    (err,) = refused(BASE + "    args:\n" + role_extra)
    assert err.key == key and words in err.message and err.line == 18


@pytest.mark.parametrize("role_extra, key, words", [
    ("    extra_args: [--x]\n", "roles.decode.extra_args", "never reads extra_args"),
    ("    critical: maybe\n", "roles.decode.critical", "true or false"),
    ("    restart: {max: 2, sometimes: 1}\n", "roles.decode.restart.sometimes", "Extra inputs"),
    ("    env: {NODE: 'n{node_id}'}\n", "roles.decode.env.NODE", "{node}"),
    ("    surprise: 1\n", "roles.decode.surprise", "unknown"),
])
def test_role_keys_refused_by_name(role_extra, key, words):
    (err,) = refused(BASE + role_extra)
    assert err.key == key and words in err.message and err.line == 17


def test_critical_true_is_what_atomdeck_does():
    assert import_text(BASE + "    critical: true\n", "r.yaml").recipe is not None


def test_critical_false_and_the_restart_policy_of_srt_slurm_451_are_carried_and_exported_back():
    """srt-slurm's roles.<role>.critical (PR #450) and restart (PR #451, its string or mapping form) are atomdeck's
    own: the same keys, the same meaning."""
    from atomdeck.core.config.srtslurm_export import export_recipe

    text = BASE + "    critical: false\n    restart:\n      policy: always\n      max_restarts: 5\n" \
                  "      backoff_seconds: 10\n      max_backoff_seconds: 120\n"
    r = import_text(text, "r.yaml").recipe
    assert r is not None and r.decode.critical is False
    assert (r.decode.restart.policy, r.decode.restart.max_restarts, r.decode.restart.max_backoff_seconds) == \
        ("always", 5, 120)
    assert r.prefill.critical and r.prefill.restart is None
    short = import_text(BASE + "    restart: on-failure\n", "r.yaml").recipe
    assert short.decode.restart.policy == "on-failure" and short.decode.restart.max_restarts == 3
    exported = export_recipe(r).text()
    assert "critical: false" in exported and "policy: always" in exported and "max_restarts: 5" in exported, exported


def test_layouts_atomdeck_cannot_reproduce_are_refused():
    head, _, tail = BASE.rpartition("    nodes: 1\n")
    (err,) = refused(head + "    nodes: colocate\n" + tail)
    assert err.key == "roles.decode.nodes" and "own nodes" in err.message
    errs = refused(BASE.replace("gpus: 8\n    args", "gpus: 16\n    args"))
    assert errs[0].key == "roles.prefill.gpus" and "one node" in errs[0].message


def test_the_global_environment_wins_over_a_roles_env():
    im = import_text(BASE + "    env: {A: role, B: mine}\nenvironment: {A: global}\n", "r.yaml")
    r = im.recipe
    assert r is not None and r.env == {"A": "global"} and r.decode.env == {"B": "mine"}
    (warn,) = [n for n in im.notes if n.kind == "warning" and n.key == "roles.decode.env.A"]
    assert "A=global" in warn.message


def test_a_local_model_is_mounted_at_model_as_srt_slurm_does():
    r = import_text(BASE.replace('"hf:Qwen/Qwen3-0.6B"', "/shared/models/Qwen3"), "r.yaml").recipe
    assert r is not None and r.model.path == "/model" and r.container_mounts == ["/shared/models/Qwen3:/model"]


def test_cluster_side_keys_become_cluster_lines():
    im = import_text(BASE + "srun_options: {container-writable: '', mem: '0'}\nsbatch_directives: {account: a}\n"
                            "slurm: {partition: compute}\n", "r.yaml")
    assert im.recipe is not None
    lines = {n.key: n.message for n in im.notes if n.kind == "cluster"}
    assert "pyxis" in lines["srun_options.container-writable"]
    assert "--mem=0" in lines["srun_options.mem"] and "not passed" in lines["srun_options.mem"]
    assert "--account=a" in lines["sbatch_directives.account"]
    assert lines["slurm.partition"] == "partition: compute"


def test_infera_is_refused_and_can_be_replaced_by_atomesh():
    text = BASE.replace("type: atomesh", "type: infera, args: {router-policy: kv-aware}")
    (err,) = refused(text)
    assert err.key == "frontend.type" and err.line == 6 and "Infera" in err.message
    im = import_text(text, "r.yaml", "atomesh")
    assert im.recipe is not None and im.recipe.router.args == {}
    assert any(n.key == "frontend.args" and "not carried" in n.message for n in im.notes)


def test_router_args_map_to_atomdecks_router():
    r = import_text(BASE.replace("enable_multiple_frontends: false",
                                 "enable_multiple_frontends: false, args: {policy: round_robin, log_level: debug, "
                                 "prometheus-port: 29001, disable_circuit_breaker: true}"), "r.yaml").recipe
    assert r is not None and (r.router.policy, r.router.log_level, r.ports.router_prometheus) == \
        ("round_robin", "debug", 29001)
    assert r.router.args == {"disable-circuit-breaker": True}  # srt-slurm writes _ as -
    (err,) = refused(BASE.replace("enable_multiple_frontends: false",
                                  "enable_multiple_frontends: false, args: {policy: dp_sticky}"))
    assert err.key == "frontend.args.policy"


@pytest.mark.parametrize("text, words", [
    ("schema: 3\nname: x\n", "schema 3"),
    ("base: {name: x}\noverride_a: {name: y}\n", "override"),
])
def test_files_that_are_not_one_recipe_are_refused(text, words):
    (err,) = refused(text)
    assert words in err.message


def test_not_yaml_or_not_a_mapping_is_a_config_error():
    with pytest.raises(ConfigError) as e:
        import_text("roles:\n  prefill: [\n", "r.yaml")
    assert e.value.issues[0].line is not None
    with pytest.raises(ConfigError):
        import_text("- a\n- b\n", "r.yaml")


# -- the verbs ------------------------------------------------------------------------------------------


def test_import_writes_a_recipe_atomdeck_loads(tmp_path, capsys):
    out = tmp_path / "r.yaml"
    src = DATA / "srtslurm" / "atomesh-disagg@3b827888.yaml"
    assert main(["import", "srt-slurm", str(src), "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Imported by `atomdeck import srt-slurm`") and "# note: line" in text
    assert load_recipe(out).name == "qwen3-0.6b-atomesh-disagg"
    assert "Imported qwen3-0.6b-atomesh-disagg" in capsys.readouterr().out
    assert main(["import", "srt-slurm", str(src), "-o", str(out)]) == 2  # exists, no --force
    assert "--force" in capsys.readouterr().err


def test_import_json_and_refusal_exit_codes(capsys):
    src = DATA / "srtslurm" / "qwen3-mi355x-agg-2w@8f0a94a1e.yaml"
    assert main(["import", "srt-slurm", str(src), "--json"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["kind"] == "config" and err["findings"][0]["key"] == "frontend.type"
    assert err["findings"][0]["line"] == src.read_text().splitlines().index("  type: infera") + 1
    assert main(["import", "srt-slurm", str(src), "--frontend", "atomesh", "--json"]) == 0
    ok = json.loads(capsys.readouterr().out)
    assert ok["schema"] == 1 and ok["output"] is None and yaml.safe_load(ok["yaml"])["mode"] == "aggregate"
    assert {n["kind"] for n in ok["notes"]} == {"warning", "cluster"}


def test_export_prints_an_srt_slurm_recipe(capsys):
    assert main(["export", "srt-slurm", "dsv4-fp4-mi355x-1p1d-tp8", "--schema", "1"]) == 0
    text = capsys.readouterr().out
    data = yaml.safe_load(text)
    assert data["backend"]["type"] == "atom" and data["resources"]["prefill_workers"] == 1
    assert "--" not in "".join(data["backend"]["atom_config"]["prefill"])  # flag names, srt-slurm adds --
    assert main(["export", "srt-slurm", "demo-1p1d", "--json"]) == 2  # no image: srt-slurm needs a container
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["findings"][0]["key"] == "image"
