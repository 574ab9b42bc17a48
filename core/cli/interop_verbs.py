"""`atomdeck import srt-slurm FILE` and `atomdeck export srt-slurm RECIPE`: other tools' recipes in and out.

Both print the converted file (or write it with -o) with every note of the conversion as comments at its
top: what was refused, what was not carried, what to set in the cluster file. Anything refused makes the
verb fail with exit 2 and nothing written, like any other bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.errors import AtomdeckError, ConfigError, ConfigIssue
from .output import print_json

if TYPE_CHECKING:  # (main.build_parser imports this module for every verb, the console too: nothing heavy here)
    from ..config.srtslurm_read import Note

FORMATS = ("srt-slurm",)


def add_parser(sub) -> None:
    p = sub.add_parser("import", help="convert another tool's recipe into an atomdeck recipe")
    p.add_argument("format", choices=FORMATS, help="the other tool: srt-slurm (schema 1 or 2, ATOM engine)")
    p.add_argument("file", help="the recipe file to convert")
    p.add_argument("-o", "--output", default=None, help="write the atomdeck recipe here (default: stdout)")
    p.add_argument("--frontend", choices=("atomesh",), default=None,
                   help="run the workers of an Infera recipe behind AToMesh instead (Infera is refused otherwise)")
    p.add_argument("--force", action="store_true", help="overwrite the -o file if it exists")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("export", help="convert an atomdeck recipe into another tool's recipe")
    p.add_argument("format", choices=FORMATS, help="the other tool: srt-slurm")
    p.add_argument("recipe", help="recipe name (from recipes/) or path to a .yaml file")
    p.add_argument("-o", "--output", default=None, help="write the srt-slurm recipe here (default: stdout)")
    p.add_argument("--schema", type=int, choices=(1, 2), default=2, help="srt-slurm recipe schema (default 2)")
    p.add_argument("--gpus-per-node", type=int, default=None, metavar="N",
                   help="resources.gpus_per_node (default: the most GPUs one node's workers use)")
    p.add_argument("--force", action="store_true", help="overwrite the -o file if it exists")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _header(title: str, notes: list[Note]) -> str:
    lines = [title]
    for n in notes:
        lines.append(str(n))
    return "\n".join(lines)


def _write(path: str | None, text: str, force: bool) -> str | None:
    if path is None:
        return None
    out = Path(path)
    if out.exists() and not force:
        raise AtomdeckError(f"{out} exists; pass --force to overwrite it, or choose another -o")
    try:
        out.write_text(text)
    except OSError as e:
        raise AtomdeckError(f"cannot write {out}: {e.strerror or e}") from None
    return str(out)


def _refused(source: str, notes: list[Note]) -> ConfigError:
    return ConfigError([ConfigIssue(source, n.key, n.message, n.line) for n in notes if n.kind == "error"])


def cmd_import(args: argparse.Namespace) -> int:
    from ..config.srtslurm import import_file

    result = import_file(args.file, args.frontend)
    if result.errors or result.recipe is None:
        raise _refused(args.file, result.notes)
    recipe = result.recipe
    text = recipe.to_yaml()
    header = _header(f"Imported by `atomdeck import srt-slurm` from {args.file} (srt-slurm schema {result.schema}).",
                     result.notes)
    body = "".join(f"# {line}\n" for line in header.splitlines()) + text
    written = _write(args.output, body, args.force)
    if args.json:
        print_json({"recipe": recipe.name, "schema": result.schema, "output": written,
                    "notes": [n.to_json() for n in result.notes], "yaml": text})
    elif written:
        print(f"Imported {recipe.name} (srt-slurm schema {result.schema}) -> {written}")
        for n in result.notes:
            print(f"  {n}")
    else:
        sys.stdout.write(body)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ..config.catalog import load_catalog
    from ..config.paths import catalog_path, find_recipe
    from ..config.recipe import load_recipe
    from ..config.srtslurm_export import export_recipe

    path = find_recipe(args.recipe)
    recipe = load_recipe(path)
    cat = catalog_path()
    catalog = load_catalog(cat) if cat.is_file() else None
    if args.gpus_per_node is not None and args.gpus_per_node < 1:
        raise AtomdeckError("--gpus-per-node must be 1 or more")
    result = export_recipe(recipe, args.schema, catalog, args.gpus_per_node)
    if result.errors:
        raise _refused(str(path), result.notes)
    text = result.text(_header(f"Exported by `atomdeck export srt-slurm` from {path}.", result.notes))
    written = _write(args.output, text, args.force)
    if args.json:
        print_json({"recipe": recipe.name, "schema": args.schema, "output": written,
                    "notes": [n.to_json() for n in result.notes], "yaml": result.text()})
    elif written:
        print(f"Exported {recipe.name} as srt-slurm schema {args.schema} -> {written}")
        for n in result.notes:
            print(f"  {n}")
    else:
        sys.stdout.write(text)
    return 0
