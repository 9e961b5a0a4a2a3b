"""Windows per concurrency bucket: a model's scrape intervals of the last window, grouped by how many requests were in
flight during each, so acceptance and throughput can be read per load level.

Each interval between two scrapes is one `WindowStats` (the increments of the model's instances, summed:
`window.pool`); its concurrency is Little's law over the requests that ended in it (`WindowStats.concurrency`). Its
bucket is the power of two nearest on a log scale (`bucket_of`: 1; 2; 3-5 -> 4; 6-11 -> 8; 12-22 -> 16; ...), the
same levels for a mean over an interval (1.7 -> 2) and for a batch size. An interval in which no request ended has no
concurrency and joins no bucket (on the torch flavour its counts are all 0: requests are counted when they end).
`BucketWindows` keeps the intervals that ended within the last `window_s` seconds and merges them per bucket
(`window.merge`: counts added, seconds added, so a bucket's tokens/s is over the time spent in it).
"""

from __future__ import annotations

import math
from collections import deque

from trtspec.ops.sample import ModelId
from trtspec.ops.window import WindowStats, merge


def bucket_of(concurrency: float) -> int:
    """Requests in flight (a mean, or a batch size) -> its bucket: the power of two nearest on a log scale (the
    boundaries are the geometric midpoints, 1.41, 2.83, 5.66, ...); 1 at or below 1."""
    if not concurrency > 1.0:
        return 1
    return 1 << round(math.log2(concurrency))


class BucketWindows:
    """Per model, the scrape intervals that ended within the last `window_s` seconds, each with its concurrency."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.intervals: dict[ModelId, deque[tuple[float, WindowStats]]] = {}

    def add(self, model: ModelId, end: float, step: WindowStats) -> None:
        """One interval of `model` that ended at `end` (seconds on the scrapes' clock); older ones expire."""
        kept = self.intervals.setdefault(model, deque())
        kept.append((end, step))
        while kept and kept[0][0] <= end - self.window_s:
            kept.popleft()

    def of(self, model: ModelId) -> dict[int, WindowStats]:
        """Bucket -> the merged intervals of `model` whose concurrency falls in it (buckets without one: absent)."""
        out: dict[int, WindowStats] = {}
        for _, step in self.intervals.get(model, ()):
            concurrency = step.concurrency
            if concurrency is None:
                continue
            bucket = bucket_of(concurrency)
            out[bucket] = merge(out[bucket], step) if bucket in out else step
        return dict(sorted(out.items()))
