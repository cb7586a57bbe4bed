"""The worker's use of Python's cyclic garbage collector.

A worker holds hundreds of thousands of long-lived objects (compiled schedules, heap entries) and makes a
few short-lived ones per fire (a staged fire, its heap entry, what the producer is handed): with the
collector's default thresholds (700, 10, 10) a worker firing 20,000 a second collected its youngest
generation ~120 times a second and walked its oldest, where every heap entry lands that outlives a second,
every few seconds: a quarter to a third of the punctuator's CPU per fire (`python -m tests.bench.tick`; the
docs/content/benchmarks/fires.md, "Where a fire's CPU goes").
"""

from __future__ import annotations

import gc

#: the youngest generation's threshold: allocations (less deallocations) between two of its collections
#: (700 by default). Most of a tick's objects die within it, so far fewer survive into the older
#: generations: at 100,000 every-second schedules 3 full collections per million fires instead of 50, of
#: ~40 ms each (`python -m tests.bench.tick`). A collection of it walks more objects, so higher is not
#: better (10,000 measured best of 700 / 10,000 / 20,000 / 50,000).
YOUNG_THRESHOLD = 10_000


def tune_collector() -> None:
    """Set the thresholds for a firing worker (the older generations' stay the default 10 and 10)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def freeze_long_lived() -> None:
    """Put what lives now in the collector's permanent generation, never scanned again: the compiled
    schedules and heap entries are hundreds of thousands of objects, and every full collection walked them
    (110-120 ms at 100,000 schedules, every ~20 s, a burst of fires late behind it). Objects still free as
    usual when unreferenced; the young generations are collected first, so only a cycle that was already
    garbage in the oldest generation would stay for good."""
    gc.collect(1)
    gc.freeze()
