"""The syncer cores a test makes, closed after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.syncer_world import Stack


@pytest.fixture
def stacks() -> Iterator[list[Stack]]:
    made: list[Stack] = []
    yield made
    for stack in made:
        stack.close()
