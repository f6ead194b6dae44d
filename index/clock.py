"""The index's one clock: recency stamps, least-recently-used marks and newest-wins ticks."""

from __future__ import annotations


class Clock:
    """A counter every part of ``store.NgramIndex`` ticks (under the index's lock): one order
    across sources, so a higher stamp is always the newer state."""

    def __init__(self) -> None:
        self.now = 0

    def tick(self) -> int:
        self.now += 1
        return self.now
