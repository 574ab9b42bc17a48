"""Stand-ins for ATOM and AToMesh that run the exact production command lines.

Put ``SHIM_DIR`` on ``PYTHONPATH`` (for ``python3 -m atom.entrypoints.openai_server``) and
``SHIM_DIR / "bin"`` on ``PATH`` (for ``atomesh launch``). See README.md for the environment
variables and faults. Nothing here imports atomdeck.core.
"""

from pathlib import Path

SHIM_DIR: Path = Path(__file__).resolve().parent / "shim"
"""Directory with the ``atom`` package shim and ``bin/atomesh``."""

__all__ = ["SHIM_DIR"]
