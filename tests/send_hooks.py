"""A test hook shared by the host and GPU timeout tests: run code before each send of a ring."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def hook_sends(link: Any, before_send: Callable[[int], None]) -> None:
    """Run ``before_send(k)`` on this rank's host before ``link`` enqueues its ``k``-th send (1, 2, ...)."""
    send, sends = link.send, [0]

    def hooked(*args: Any) -> None:
        sends[0] += 1
        before_send(sends[0])
        send(*args)

    link.send = hooked
