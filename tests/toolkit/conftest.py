"""Fixtures for the self-contained toolkit's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit_build import toolkit_tree


@pytest.fixture(scope="session")
def toolkit() -> Path:
    return toolkit_tree()
