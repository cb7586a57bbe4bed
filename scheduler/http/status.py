"""HTTP for how the workers are doing: `/health` (this worker: ready or why not, its partitions, its
counters) and `/stats/fires` (fires and their lateness per minute, from every worker: the admin page's
chart)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from scheduler.http import responses as out
from scheduler.http.calls import Call
from scheduler.http.cluster import Cluster, Unavailable
from scheduler.worker.counters import quantile_ms
from scheduler.worker.liveness import not_ready_because

if TYPE_CHECKING:
    from faust.web import Response

    from scheduler.worker.ports import WebPort


class Handlers(Protocol):
    """What these handlers use of the HTTP handlers (scheduler.http.web)."""

    worker: WebPort
    cluster: Cluster


async def fire_stats(h: Handlers, call: Call) -> Response:
    """Fires and their lateness per minute over the last `minutes` (1-60, default 60) and the current
    one, from every worker (what the admin page draws): the scheduled fires each worker's punctuator
    observed, per lateness bucket, summed, with p50 and p99 (a bucket's upper bound)."""
    try:
        minutes = int(call.request.query.get("minutes", "60"))
        if not 1 <= minutes <= 60:
            raise ValueError
    except ValueError:
        return call.field_error("minutes", "must be an integer between 1 and 60")
    hist = h.worker.counts.fires.lateness
    local = {
        "bucketsMs": list(hist.bounds_ms),
        "minutes": _minute_rows(hist.bounds_ms, hist.history(minutes)),
    }
    try:
        bodies = await h.cluster.fan_out_bodies(
            call.request, "/stats/fires", {"minutes": str(minutes)}, local
        )
    except Unavailable as exc:
        return call.unavailable(str(exc))
    merged: dict[int, list[int]] = {}
    for body in bodies:
        for row in body["minutes"]:
            counts = merged.setdefault(row["at"], [0] * (len(hist.bounds_ms) + 1))
            for i, n in enumerate(row["counts"]):
                counts[i] += n
    return call.answer(
        out.FireStats,
        {"bucketsMs": list(hist.bounds_ms), "minutes": _minute_rows(hist.bounds_ms, merged)},
    )


async def health(h: Handlers, call: Call) -> Response:
    worker = h.worker
    why = not_ready_because(worker.faust_app, worker.assigned, worker.liveness)
    return call.answer(
        out.Health,
        {
            "status": "ok",
            "partitions": sorted(worker.active_partitions()),
            # ready: in the group, queries answered (not 503), every loop keeping up
            "ready": why is None,
            **({"notReady": why} if why is not None else {}),
            "stalled": worker.liveness.stalled(),
            "fires": worker.counts.fires.fires,
            "excludedFires": worker.counts.fires.excluded,
            "partitionsUnreadable": worker.counts.fires.unreadable,
            "catchUpFires": worker.counts.fires.catch_up_fires,
            "commandsApplied": worker.counts.commands_applied,
            "deadLetters": worker.counts.dead_letters_total,
            **worker.counts.events,
        },
    )


def _minute_rows(bounds_ms: tuple[int, ...], history: dict[int, list[int]]) -> list[dict[str, Any]]:
    return [
        {"at": at, "fires": sum(counts), "p50Ms": quantile_ms(bounds_ms, counts, 0.5),
         "p99Ms": quantile_ms(bounds_ms, counts, 0.99), "counts": counts}
        for at, counts in sorted(history.items())
    ]  # fmt: skip
