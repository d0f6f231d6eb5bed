"""`make demo`: the stack up, and what it holds."""

from __future__ import annotations

from devstack import stack
from devstack.config import StackConfig


def run(cfg: StackConfig) -> int:
    print(stack.summary(cfg))
    return 0
