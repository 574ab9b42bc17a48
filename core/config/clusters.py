"""Several clusters: the clusters file, contexts, and finding a cluster by name.

One file holds any number of clusters, each under its name, with the same keys as a cluster file, and the
context used when a command names none (as kubectl's kubeconfig does):

    # ~/.config/atomdeck/clusters.yaml  ($ATOMDECK_CLUSTERS names another file)
    current: lab
    clusters:
      lab:                      # the context's name; `name:` inside may be left out (it is the key)
        launcher: slurm
        partition: gpu
      demo:
        launcher: local
        nodes: [{name: node1, addr: 127.0.0.11}]

A context is a cluster by name. The names known are the clusters file's, then the cluster files' as before
(./recipes/clusters, ~/.config/atomdeck/clusters, the shipped ones): the first of a name wins. The whole file
is validated when it is read; every problem is named with its key path (clusters.lab.partition), its line
and what to change, as in a cluster file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import AtomdeckError, ConfigError, ConfigIssue
from .paths import config_dir, find_cluster, recipes_dir

# Light at import (the console's first frame is drawn before pydantic and YAML are imported: tui/app.py): the
# models and the YAML reader are imported where a file is read.
if TYPE_CHECKING:
    import yaml

    from .cluster import Cluster
    from .yamlio import YamlDoc

DEFAULT_CONTEXT = "local"  # the demo: what a command works on when nothing is named or current
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
TOP_KEYS = ("current", "clusters")


def clusters_file() -> Path:
    """Where the clusters file is: $ATOMDECK_CLUSTERS, else ~/.config/atomdeck/clusters.yaml."""
    return Path(os.environ.get("ATOMDECK_CLUSTERS") or config_dir() / "clusters.yaml").expanduser()


@dataclass(frozen=True)
class ClustersFile:
    path: Path
    current: str | None
    clusters: dict[str, Cluster]  # in the file's order


@dataclass(frozen=True)
class ClusterRef:
    """Where a context comes from: an entry of the clusters file, or a cluster file of its own."""

    name: str
    path: Path
    in_clusters_file: bool

    @property
    def source(self) -> str:
        return f"{self.path} (clusters.{self.name})" if self.in_clusters_file else str(self.path)


def _entry_nodes(doc: YamlDoc) -> dict[str, yaml.Node]:
    """The YAML node of each entry under `clusters:` (for line numbers inside the entry)."""
    import yaml

    out: dict[str, yaml.Node] = {}
    root = doc.root
    if not isinstance(root, yaml.MappingNode):
        return out
    for k, v in root.value:
        if isinstance(k, yaml.ScalarNode) and k.value == "clusters" and isinstance(v, yaml.MappingNode):
            for ek, ev in v.value:
                if isinstance(ek, yaml.ScalarNode):
                    out[ek.value] = ev
    return out


def parse_clusters_doc(doc: YamlDoc) -> ClustersFile:
    """Validate a clusters file: its two keys, each entry as a cluster, `current` naming a cluster. Every
    problem is collected and raised at once (ConfigError), each with its key path and line."""
    from .cluster import Cluster, cluster_from_doc
    from .yamlio import YamlDoc

    src = doc.source
    issues: list[ConfigIssue] = []

    def add(path: tuple, msg: str) -> None:
        issues.append(ConfigIssue(src, ".".join(str(p) for p in path), msg, doc.line_of(path)))

    data = doc.data if doc.data is not None else {}
    if not isinstance(data, dict):
        raise ConfigError([ConfigIssue(src, "", "must be a mapping with `clusters:` (name -> cluster) and "
                                       "`current:` (a name)", doc.line_of(()))])
    for key in data:
        if key not in TOP_KEYS:
            hint = ("; a cluster's own keys go under clusters.NAME" if key in Cluster.model_fields else
                    f"; known keys: {', '.join(TOP_KEYS)}")
            add((key,), f"unknown key; remove it{hint}")
    entries = data.get("clusters")
    if entries is None:
        entries = {}
    if not isinstance(entries, dict):
        add(("clusters",), "must be a mapping of cluster names to clusters, e.g. `clusters: {lab: {launcher: "
                           "slurm}}`")
        entries = {}
    nodes = _entry_nodes(doc)
    clusters: dict[str, Cluster] = {}
    for key, body in entries.items():
        name = str(key)
        where = ("clusters", name)
        if not NAME.fullmatch(name):
            add(where, f"{name!r} cannot be a cluster name; use letters, digits, '.', '_' and '-'")
            continue
        if body is None:
            body = {}
        if not isinstance(body, dict):
            add(where, f"must be a cluster (a mapping of its keys, e.g. launcher: slurm), got {body!r}")
            continue
        if "name" in body and body["name"] != name:
            add((*where, "name"), f"is {body['name']!r} but the entry is called {name!r}; remove `name:` (the "
                                  "entry's key is its name) or make them the same")
            continue
        sub = YamlDoc({"name": name, **body}, nodes.get(name), src)
        try:
            clusters[name] = cluster_from_doc(sub)
        except ConfigError as e:  # the entry's issues, with the whole key path
            issues += [replace(i, path=".".join(x for x in ("clusters", name, i.path) if x)) for i in e.issues]
    current = data.get("current")
    if current is not None and not isinstance(current, str):
        add(("current",), f"must be a cluster name, got {current!r}")
        current = None
    elif isinstance(current, str) and current not in entries:
        try:
            find_cluster(current)  # a cluster file's name is a context too
        except AtomdeckError:
            known = list(dict.fromkeys([*map(str, entries), *_file_names()]))
            add(("current",), f"no cluster named {current!r}; name one of: {', '.join(known) or '(none)'}")
    if issues:
        raise ConfigError(sorted(issues, key=lambda i: i.line or 0))
    return ClustersFile(Path(src), current, clusters)


def read_clusters_file(path: Path | None = None) -> ClustersFile | None:
    """The clusters file, validated; None when there is none."""
    path = path or clusters_file()
    if not path.is_file():
        if "ATOMDECK_CLUSTERS" in os.environ and path == clusters_file():
            raise AtomdeckError(f"ATOMDECK_CLUSTERS={path} does not exist; write the clusters file there or unset "
                                "ATOMDECK_CLUSTERS")
        return None
    from .yamlio import read_yaml

    return parse_clusters_doc(read_yaml(path))


def _dirs() -> list[Path]:
    return [Path.cwd() / "recipes" / "clusters", config_dir() / "clusters", recipes_dir() / "clusters"]


def _file_names() -> list[str]:
    names: list[str] = []
    for d in _dirs():
        if d.is_dir():
            names += [f.stem for f in sorted(d.glob("*.y*ml"))]
    return list(dict.fromkeys(names))


def _is_path(spec: str) -> bool:
    return Path(spec).suffix in (".yaml", ".yml") or os.sep in spec


def find(spec: str) -> ClusterRef:
    """A cluster by name (the clusters file first, then the cluster files) or by the path of a cluster file.
    An unknown name is an AtomdeckError naming the known ones."""
    if not _is_path(spec):
        cf = read_clusters_file()
        if cf is not None and spec in cf.clusters:
            return ClusterRef(spec, cf.path, True)
    try:
        path = find_cluster(spec)
    except AtomdeckError:
        if _is_path(spec):
            raise
        raise AtomdeckError(f"no cluster named '{spec}'; known clusters: {', '.join(context_names()) or '(none)'} "
                            f"(the clusters file {clusters_file()}, then the cluster files in "
                            f"{', '.join(str(d) for d in _dirs())})") from None
    return ClusterRef(path.stem if not _is_path(spec) else spec, path, False)


def load(spec: str) -> tuple[Cluster, Path]:
    """The cluster a name or a path means, validated, and the file it came from."""
    from .cluster import load_cluster

    ref = find(spec)
    if ref.in_clusters_file:
        cf = read_clusters_file(ref.path)
        assert cf is not None
        return cf.clusters[ref.name], ref.path
    if _is_path(spec) and _looks_like_clusters_file(ref.path):
        raise AtomdeckError(f"{spec} holds several clusters; name one with --context NAME (set ATOMDECK_CLUSTERS="
                            f"{spec} to use this file)")
    return load_cluster(ref.path), ref.path


def _looks_like_clusters_file(path: Path) -> bool:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and isinstance(data.get("clusters"), dict) and "launcher" not in data


def contexts() -> list[ClusterRef]:
    """Every cluster known by name: the clusters file's entries in their order, then the cluster files'
    (a name already known is left out: the first wins, as `find` does)."""
    out: list[ClusterRef] = []
    cf = read_clusters_file()
    if cf is not None:
        out += [ClusterRef(name, cf.path, True) for name in cf.clusters]
    seen = {r.name for r in out}
    for d in _dirs():
        if not d.is_dir():
            continue
        for f in sorted(d.glob("*.y*ml")):
            if f.stem not in seen:
                seen.add(f.stem)
                out.append(ClusterRef(f.stem, f, False))
    return out


def context_names() -> list[str]:
    try:
        return [r.name for r in contexts()]
    except AtomdeckError:  # a broken clusters file: the files' names still help
        return _file_names()


def current_context() -> str:
    """The context a command works on when it names none: the clusters file's `current`, else the demo."""
    cf = read_clusters_file()
    return (cf.current if cf is not None and cf.current else None) or DEFAULT_CONTEXT


def choose(cluster: str | None, context: str | None) -> str | None:
    """The cluster a command line names: --cluster NAME|PATH or --context NAME (the same cluster when both
    are given), else None (the caller's default). A path given as --context, or two different clusters, is
    an AtomdeckError (exit 2)."""
    if context is not None and _is_path(context):
        raise AtomdeckError(f"--context takes a cluster's name, not a path ({context}); give a file with --cluster")
    if cluster is not None and context is not None and cluster != context:
        if _is_path(cluster) or find(cluster).name != find(context).name:
            raise AtomdeckError(f"--cluster {cluster} and --context {context} name two clusters; give one")
    return context if context is not None else cluster


def set_current(name: str) -> Path:
    """Make `name` the current context: rewrite the `current:` line of the clusters file (comments and the
    rest kept), or start the file. The result is validated before it replaces the file."""
    if _is_path(name):
        raise AtomdeckError(f"a context is a cluster's name, not a path ({name}); add the cluster to "
                            f"{clusters_file()} under clusters: to name it")
    find(name)  # an unknown name says which are known
    path = clusters_file()
    text = path.read_text() if path.is_file() else "clusters: {}\n"
    line = f"current: {name}"
    lines = text.splitlines()
    at = next((i for i, x in enumerate(lines) if re.match(r"current\s*:", x)), None)
    if at is not None:
        comment = re.search(r"\s+#.*$", lines[at])
        lines[at] = line + (comment.group(0) if comment else "")
    else:  # after the leading comments
        head = next((i for i, x in enumerate(lines) if x.strip() and not x.lstrip().startswith("#")), len(lines))
        lines.insert(head, line)
    new = "\n".join(lines) + "\n"
    from .yamlio import parse_yaml

    parse_clusters_doc(parse_yaml(new, str(path)))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(new)
    os.replace(tmp, path)
    return path
