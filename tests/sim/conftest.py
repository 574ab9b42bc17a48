"""Fixtures for the simulator tests."""

from pathlib import Path

import pytest

from .simhelpers import Spawner


@pytest.fixture
def spawn(tmp_path: Path):
    """Start processes in their own sessions; kill whatever is left at the end."""
    spawner = Spawner(tmp_path)
    yield spawner
    spawner.cleanup()
