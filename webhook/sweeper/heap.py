"""The cyclic garbage collector's full passes, kept off the pod events.

What the sweeper keeps (every watched pod, workload and owned object) lives for hours and is
almost all plain dicts without cycles. A full pass of Python's cyclic collector walks all of it:
about 160 ms at 10,000 pods, half a second after a whole job's pods were recreated. The churn of
pod events triggers such a pass now and then, and the event it lands on pays for it, many times
the 1 ms an event is meant to cost. So, at a moment the sweeper has nothing to do and at most once
a period, `Heap.tidy` collects the young generations (what the last seconds made) and freezes
everything that survived (`gc.freeze`): the passes the interpreter triggers on its own walk only
what was made since. Every `THAW_EVERY`-th tidy unfreezes everything and walks it all, so cyclic
garbage that grew old before it died is still collected, late; that walk is the only full pass
the sweeper makes on its own. The interpreter's own full passes, which found nothing to collect
in a bench run's 21 (2.3 s of CPU), are made rare: one after `FULL_AFTER` passes of the middle
generation rather than ten.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

PERIOD_SECONDS = 60.0
THAW_EVERY = 10  # tidies: a whole walk every ten minutes at the chart's period
FULL_AFTER = 1000
YOUNG = 1  # the generations a tidy walks between the thawing ones: 0 and 1


class Heap:
    """Full collections at idle moments, at most one every `period` seconds; 0 turns it off."""

    def __init__(
        self, period: float = PERIOD_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.period = period
        self._clock = clock
        if period > 0:
            young, middle, _ = gc.get_threshold()
            gc.set_threshold(young, middle, FULL_AFTER)
        self._tidied: float | None = None
        self.tidied = 0  # tidies run

    def tidy(self) -> bool:
        """At an idle moment: collect the young generations (every generation, thawed, every
        `THAW_EVERY`-th time) and freeze the survivors, unless done less than a period ago.
        Whether it ran."""
        now = self._clock()
        if self.period <= 0 or (self._tidied is not None and now - self._tidied < self.period):
            return False
        if self.tidied % THAW_EVERY == 0:
            gc.unfreeze()
            gc.collect()
        else:
            gc.collect(YOUNG)
        gc.freeze()
        self._tidied = now
        self.tidied += 1
        return True
