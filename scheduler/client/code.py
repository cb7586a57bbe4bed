"""Schedules declared in Python, next to the functions they run (as Dagster's `@schedule`/`@sensor` or
APScheduler's decorators), collected by `scheduler apply --module pkg.jobs`:

    from scheduler.client.code import after, on_partitions, schedule

    @schedule(tenant="acme", cron="0 3 * * *", tz="Europe/Paris")
    def nightly(args: dict[str, str]) -> None: ...

    @schedule(tenant="acme", every="15m", overlap="SKIP")
    @on_partitions("acme.clicks", tenant="acme", min_partitions=4)
    def refresh(args): ...                     # two schedules, one program

    @after(nightly, tenant="acme")              # when a run of nightly SUCCEEDED
    def report(args): ...

    @schedule(tenant="acme", cron="0 * * * *", spark=True)
    def hourly_etl(spark, args): ...           # a pyspark program: function(spark, args)

    @sensor(tenant="acme", every="1m")          # a polling sensor, evaluated by the workers
    def new_exports(cursor): ...               # answers as docs/content/how-to/sensors.md says

    @on_sensor(new_exports, tenant="acme")      # each time it fires
    def load_exports(args): ...

Each decorated function is a program `tenant/module/python/function` of kind `python` (called by the
launcher's own Python with the job's arguments; `spark=True`: kind `pyspark`), and each decorator a
schedule named after the function (`name=` to choose; a second one on a function gets its trigger's kind
appended). Other keyword arguments are the schedule's fields as the HTTP API spells them (`overlap`,
`retry`, `labels`, `enabled`, …); `enabled` is true unless said. Decorating changes nothing about the
function: it is returned as it was, with the declarations in its `__schedules__` (a sensor's in
`__sensor__`: a program `tenant/module/sensor/function` of kind `sensor`, no schedule of its own)."""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
_UNITS = {"s": "SECONDS", "m": "MINUTES", "h": "HOURS", "d": "DAYS"}


def every_trigger(every: str) -> dict[str, Any]:
    """`30s`, `15m`, `2h`, `1d` as a frequency trigger."""
    found = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", every)
    if found is None:
        raise ValueError(f"every={every!r}: expected a number and a unit, s m h or d (15m, 2h)")
    return {"type": "frequency", "timeUnit": _UNITS[found.group(2)], "time": int(found.group(1))}


def every_ms(every: str) -> int:
    """`30s`, `15m`, `2h`, `1d` in milliseconds."""
    trigger = every_trigger(every)
    unit = {"SECONDS": 1_000, "MINUTES": 60_000, "HOURS": 3_600_000, "DAYS": 86_400_000}[trigger["timeUnit"]]
    return int(trigger["time"]) * unit


def _declare(
    trigger: dict[str, Any], tenant: str, name: str | None, spark: bool, fields: dict[str, Any]
) -> Callable[[F], F]:
    def decorate(function: F) -> F:
        declared = list(getattr(function, "__schedules__", []))
        declared.append(
            {"tenant": tenant, "name": name, "trigger": trigger, "spark": spark, "fields": fields}
        )
        function.__schedules__ = declared  # type: ignore[attr-defined]
        return function

    return decorate


def schedule(
    *,
    tenant: str,
    cron: str | None = None,
    every: str | None = None,
    tz: str = "UTC",
    name: str | None = None,
    spark: bool = False,
    **fields: Any,
) -> Callable[[F], F]:
    """On a clock: `cron` (5 or 6 fields, in `tz`) or `every` (15m, 2h, …)."""
    if (cron is None) == (every is None):
        raise ValueError("@schedule takes one of cron= and every=")
    trigger = (
        {"type": "cron", "expression": cron, "timezone": tz}
        if cron is not None
        else every_trigger(every or "")
    )
    return _declare(trigger, tenant, name, spark, fields)


def on_partitions(
    dataset: str,
    *,
    tenant: str,
    min_partitions: int = 1,
    name: str | None = None,
    spark: bool = False,
    **fields: Any,
) -> Callable[[F], F]:
    """When `min_partitions` new partitions of `dataset` arrived (its events)."""
    trigger = {"type": "partition", "dataset": dataset, "minPartitions": min_partitions}
    return _declare(trigger, tenant, name, spark, fields)


def after(
    upstream: Callable[..., Any] | str,
    *,
    tenant: str,
    on: Iterable[str] = ("SUCCEEDED",),
    name: str | None = None,
    spark: bool = False,
    **fields: Any,
) -> Callable[[F], F]:
    """When a run of `upstream` (a decorated function, or a program id) ends as one of `on`."""
    trigger = {"type": "programStatus", "program": upstream if isinstance(upstream, str) else upstream,
               "on": list(on)}  # fmt: skip
    return _declare(trigger, tenant, name, spark, fields)


def sensor(
    *, tenant: str, every: str = "30s", time_limit: str | None = None, **fields: Any
) -> Callable[[F], F]:
    """A polling sensor: `function(cursor)` evaluated every `every` by the worker owning it (within
    `time_limit`, default 60 s); schedules fire on it with @on_sensor (or a `sensor` trigger)."""
    spec = {"intervalMs": every_ms(every), **fields}
    if time_limit is not None:
        spec["timeLimitMs"] = every_ms(time_limit)

    def decorate(function: F) -> F:
        function.__sensor__ = {"tenant": tenant, "spec": spec}  # type: ignore[attr-defined]
        return function

    return decorate


def on_sensor(
    check: Callable[..., Any] | str,
    *,
    tenant: str,
    name: str | None = None,
    spark: bool = False,
    **fields: Any,
) -> Callable[[F], F]:
    """Each time the sensor `check` (a @sensor function, or a sensor's program id) says so."""
    return _declare({"type": "sensor", "sensor": check}, tenant, name, spark, fields)


def program_id(
    function: Callable[..., Any], tenant: str, spark: bool = False, kind: str | None = None
) -> str:
    module = function.__module__.replace(".", "-").replace("_", "-")
    return f"{tenant}/{module}/{kind or ('pyspark' if spark else 'python')}/{function.__qualname__}"


def collect(modules: Iterable[str]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
    """The programs and schedules the modules' decorated functions declare (imported from the current
    directory too, as `python -m` would), and where each came from (key or program id -> "module:function")."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    programs: dict[str, dict[str, Any]] = {}
    schedules: list[dict[str, Any]] = []
    origin: dict[str, str] = {}
    for module_name in modules:
        module = importlib.import_module(module_name)
        for function in vars(module).values():
            declared = getattr(function, "__schedules__", None) or []
            checks = getattr(function, "__sensor__", None)
            if (
                not callable(function)
                or not (declared or checks)
                or getattr(function, "__module__", None) != module.__name__
            ):
                continue  # (imported from elsewhere: declared where it is defined)
            where = f"{module.__name__}:{function.__qualname__}"
            if checks:
                program = program_id(function, checks["tenant"], kind="sensor")
                programs[program] = {"kind": "sensor", "target": where, **checks["spec"],
                                     "description": (function.__doc__ or where).strip()[:1024]}  # fmt: skip
                origin[program] = where
            for i, d in enumerate(declared):
                program = program_id(function, d["tenant"], d["spark"])
                kind = "pyspark" if d["spark"] else "python"
                programs[program] = {
                    "kind": kind,
                    "target": where,
                    "description": (function.__doc__ or where).strip()[:1024],
                }
                origin[program] = where
                trigger = dict(d["trigger"])
                if trigger["type"] == "programStatus" and callable(trigger["program"]):
                    upstream = trigger["program"]
                    upstream_spark = any(u["spark"] for u in getattr(upstream, "__schedules__", []))
                    trigger["program"] = program_id(upstream, d["tenant"], upstream_spark)
                if trigger["type"] == "sensor" and callable(trigger["sensor"]):
                    check = trigger["sensor"]
                    if not getattr(check, "__sensor__", None):
                        raise ValueError(f"@on_sensor({check.__qualname__}): not a @sensor function")
                    trigger["sensor"] = program_id(check, check.__sensor__["tenant"], kind="sensor")
                base = function.__name__.replace("_", "-")
                name = d["name"] or (base if i == len(declared) - 1 else f"{base}-{trigger['type'].lower()}")
                body = {"tenant": d["tenant"], "name": name, "program": program, "enabled": True, "trigger": trigger,
                        **d["fields"]}  # fmt: skip
                schedules.append(body)
                origin[f"{d['tenant']}/{name}"] = where
    return programs, schedules, origin
