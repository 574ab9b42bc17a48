"""Every key binding of the console, with a stable id, and the user's keymap.

Users remap keys by id in `$XDG_CONFIG_HOME/atomdeck/keymap.yaml`, one `id: key` per line
(several keys: `launch: "L,ctrl+l"`). The help screen lists these ids.
"""

from __future__ import annotations

from pathlib import Path

from textual.binding import Binding

from ..core.config.paths import config_dir


def _b(key: str, action: str, description: str, id: str, show: bool = True, priority: bool = False,
       key_display: str | None = None, tooltip: str = "", group: Binding.Group | None = None) -> Binding:
    return Binding(key, action, description, show=show, id=id, priority=priority, key_display=key_display,
                   tooltip=tooltip, group=group)


# Footer groups: related keys share one title (Textual draws a group compactly).
FIND = Binding.Group("Find", compact=True)
ACT = Binding.Group("Restart/Remove/Add", compact=True)  # actions on the live run (issue 38): asks first
ASSIGN = Binding.Group("Assign", compact=True)
PANELS = Binding.Group("Panels", compact=True)


# Everywhere (the App). Views are reached like k9s: number keys, or the command palette.
APP = [
    _b("1", "view('nodes')", "Nodes", "view.nodes", show=False),
    _b("2", "view('layout')", "Layout", "view.layout", show=False),
    _b("3", "view('preview')", "Preview", "view.preview", show=False),
    _b("4", "view('run')", "Run", "view.run", show=False),
    _b("5", "view('runs')", "Runs", "view.runs", show=False),
    _b("6", "view('bench')", "Bench", "view.bench", show=False),
    _b("7", "view('sweep')", "Sweep", "view.sweep", show=False),
    _b("L,ctrl+l", "launch", "Launch", "launch", key_display="L",
       tooltip="Show every command in the preview; L there launches"),
    _b("ctrl+o", "open", "Open", "open", show=False),
    _b("colon", "command", "Command", "command", show=False, key_display=":",
       tooltip="k9s's command line: ctx lists the clusters, ctx NAME switches, a view's name shows it"),
    _b("ctrl+r", "refresh_inventory", "Refresh nodes", "refresh", show=False),
    _b("ctrl+s", "save_recipe", "Save recipe", "save", show=False),
    _b("ctrl+t", "change_theme", "Theme", "theme", show=False),
    _b("question_mark", "help", "Help", "help", key_display="?",
       tooltip="Every key, by view, with its id for keymap.yaml"),
    _b("q", "quit", "Quit", "quit", tooltip="Quit the console; a running deployment keeps running"),
]

NODES = [
    _b("slash", "filter", "Filter", "nodes.filter", key_display="/", tooltip="Filter nodes by name, state or reason"),
    _b("space", "toggle", "Pick", "nodes.toggle", tooltip="Pick or unpick the node under the cursor"),
    _b("a", "auto", "Auto-pick", "nodes.auto", tooltip="Pick the healthy nodes the layout needs"),
    _b("o", "override", "Override", "nodes.override",
       tooltip="Use an excluded or unhealthy node anyway (a warning stays)"),
    _b("n", "add_names", "Add by name", "nodes.add"),
    _b("g", "read_gpus", "GPUs", "nodes.gpus", tooltip="Read every node's GPUs again (amd-smi): free VRAM, memory "
       "held by another job or an orphan"),
    _b("escape", "clear_filter", "Clear filter", "nodes.clear-filter", show=False),
]

LAYOUT = [
    _b("p", "assign('prefill')", "→ prefill", "layout.prefill", group=ASSIGN,
       tooltip="Make the selected node a prefill node"),
    _b("d", "assign('decode')", "→ decode", "layout.decode", group=ASSIGN,
       tooltip="Make the selected node a decode node"),
    _b("r", "router_here", "Router here", "layout.router", tooltip="Run the router on the selected node"),
    _b("a", "auto", "Auto-pick", "layout.auto"),
    _b("f", "form", "Fields", "layout.form", tooltip="Edit counts, TP, ports and policy"),
    _b("escape", "leave_form", "Leave field", "layout.leave-form", show=False),
]

PREVIEW = [
    _b("c", "copy", "Copy command", "preview.copy", tooltip="Copy the selected process's command"),
    _b("e", "app.export", "Export script", "export", tooltip="Write every command as one shell script"),
    _b("w", "app.save_recipe", "Save recipe", "preview.save", tooltip="Save the edited design as a recipe file"),
]

START = [
    _b("ctrl+o", "open", "Open", "start.open"),
    _b("escape", "cancel", "Cancel", "start.cancel"),
]

DIALOG = [
    _b("y", "yes", "Yes", "dialog.yes"),
    _b("n,escape", "no", "No", "dialog.no", key_display="n/esc"),
]

# The run view: enter on a process (or a node of the barrier grid) opens its log.
# Below 140 columns the run view's right-hand panels sit under the tables, below the fold at 100x30:
# a key brings each into view (one "Panels" entry in the footer).
RUN = [
    _b("r", "panel('router-box')", "Router", "run.panel.router", group=PANELS,
       tooltip="Bring the Router panel into view"),
    _b("s", "panel('serving-box')", "Serving", "run.panel.serving", group=PANELS,
       tooltip="Bring the Serving panel (rates, errors, KV cache) into view"),
    _b("k", "panel('pairs-box')", "KV", "run.panel.pairs", group=PANELS,
       tooltip="Bring the KV handshake panel into view"),
    _b("n", "panel('nodes-box')", "Nodes", "run.panel.nodes", group=PANELS, tooltip="Bring the Nodes panel into view"),
    _b("w", "panel('why-box')", "Why", "run.panel.why", group=PANELS, tooltip="Bring the diagnosis into view"),
    _b("p", "panel('procs-box')", "Processes", "run.panel.procs", group=PANELS, tooltip="Back to the processes"),
    _b("l", "open_log", "Logs", "run.logs", tooltip="Open the selected process's (or node's) log"),
    _b("S", "snapshot", "Snapshot", "run.snapshot",
       tooltip="Where every rank of every process is: stacks, kernel state, connections (hang forensics)"),
    _b("R", "act('restart')", "Restart", "run.restart", group=ACT,
       tooltip="Restart the selected process in place: drain, stop, start, ready, re-register (asks first)"),
    _b("X", "act('remove')", "Remove", "run.remove", group=ACT,
       tooltip="Drain the selected worker, stop it and take it out of the run (asks first)"),
    _b("A", "add('decode')", "Add decode", "run.add", group=ACT,
       tooltip="Add a decode worker on a free node or slot (asks first)"),
    _b("D,ctrl+d", "teardown", "Tear down", "teardown", key_display="D",
       tooltip="Stop every process of the run and verify (asks first)"),
]

LOGS = [
    _b("slash", "search", "Search", "log.search", key_display="/", group=FIND, tooltip="Search this log"),
    _b("n", "find(False)", "Next", "log.next", group=FIND, tooltip="Next match"),
    _b("N", "find(True)", "Previous", "log.previous", group=FIND, tooltip="Previous match"),
    _b("end,f,F", "follow", "Follow", "log.follow", key_display="End/F",
       tooltip="Follow new lines (scrolling up pauses)"),
    _b("w", "wrap", "Wrap", "log.wrap", tooltip="Wrap long lines"),
    _b("s", "save", "Save", "log.save", tooltip="Save this log to a file"),
    _b("escape", "close", "Back", "log.close", key_display="esc"),
]

CONTEXTS = [
    _b("enter", "switch", "Switch", "contexts.switch", tooltip="Show this cluster; the others stay watched"),
    _b("escape", "close", "Close", "contexts.close", key_display="esc"),
]

# The snapshot view (hang forensics), over the run view: enter on a group shows each rank's stack.
SNAPSHOT = [
    _b("c", "compare", "Compare", "snapshot.compare",
       tooltip="Take another snapshot and mark each group stuck, moved or idle"),
    _b("r", "retake", "New snapshot", "snapshot.retake", tooltip="Take a fresh snapshot"),
    _b("escape", "close", "Back", "snapshot.close", key_display="esc"),
]

RUNS = [
    _b("o", "open_run", "Open", "runs.open", tooltip="Watch this run again"),
    _b("r", "reload", "Reload", "runs.reload", tooltip="Read the run directories again"),
    _b("D,ctrl+d", "teardown", "Tear down", "teardown", key_display="D",
       tooltip="Stop every process of the run and verify (asks first)"),
]

# The bench view: enter in the workload form starts too.
BENCH = [
    _b("b", "start", "Bench", "bench.start", tooltip="Measure the attached run with the workload in the form"),
    _b("s", "stop", "Stop", "bench.stop", tooltip="Stop the bench; the steps done are kept"),
    _b("x", "export", "Export", "bench.export", tooltip="Write the comparison as JSON, CSV and SVG into the run "
       "directory"),
    _b("g", "basis", "Per GPU", "bench.basis", tooltip="Per GPU as srt-slurm (output / all GPUs) or InferenceX "
       "(output / decode GPUs)"),
]

# The sweep view (layout search): enter in the form starts too.
SWEEP = [
    _b("b", "start", "Search", "sweep.start", tooltip="Bring each layout up in turn, bench it, tear it down; resumes "
       "a search stopped before"),
    _b("s", "stop", "Stop", "sweep.stop", tooltip="Stop the search: the layout under way is torn down, the done ones "
       "kept"),
    _b("g", "basis", "Per GPU", "sweep.basis", tooltip="Per GPU as srt-slurm (output / all GPUs) or InferenceX "
       "(output / decode GPUs)"),
]

TEARDOWN = [
    _b("escape,enter", "close", "Close", "teardown.close", key_display="esc"),
]

HELP = [
    _b("escape,question_mark,q", "close", "Close", "help.close", key_display="esc"),
]

# Where each group applies, for the help screen.
SCOPES: dict[str, list[Binding]] = {
    "Everywhere": APP, "Nodes": NODES, "Layout": LAYOUT, "Preview": PREVIEW, "Run": RUN, "Logs": LOGS,
    "Snapshot": SNAPSHOT, "Runs": RUNS, "Contexts": CONTEXTS, "Bench": BENCH, "Sweep": SWEEP, "Teardown": TEARDOWN,
    "Open": START,
    "Dialogs": DIALOG, "Help": HELP,
}


def binding_ids() -> set[str]:
    return {b.id for group in SCOPES.values() for b in group if b.id}


def keymap_path() -> Path:
    return config_dir() / "keymap.yaml"


def load_keymap(path: Path | None = None) -> tuple[dict[str, str], list[str]]:
    """(keymap, problems). A missing file is an empty keymap; a bad entry is skipped and reported."""
    path = path or keymap_path()
    if not path.is_file():
        return {}, []
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        return {}, [f"{path}: cannot be read ({e}); using the default keys"]
    if not isinstance(data, dict):
        return {}, [f"{path}: expected lines of 'binding-id: key', e.g. 'launch: ctrl+g'"]
    known = binding_ids()
    keymap: dict[str, str] = {}
    problems: list[str] = []
    for bid, key in data.items():
        if bid not in known:
            problems.append(f"{path}: unknown binding id '{bid}' (see ? for the ids)")
        elif not isinstance(key, str) or not key.strip():
            problems.append(f"{path}: '{bid}' needs a key such as 'ctrl+g', got {key!r}")
        else:
            keymap[str(bid)] = key.strip()
    return keymap, problems
