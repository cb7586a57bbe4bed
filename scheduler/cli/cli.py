"""Command line: `scheduler worker`, `scheduler run` (embedded broker + worker), `scheduler tail TOPIC`,
and the HTTP API's client commands (`scheduler schedules|jobs|runs|events ...`, `scheduler token new`)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import importlib
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler.cli import backfills
from scheduler.cli.errors import guarded
from scheduler.domain.basics import plural
from scheduler.kafka.config import Settings
from scheduler.worker import logs

if TYPE_CHECKING:
    from scheduler.client.http import HttpClient


def _settings(args: argparse.Namespace, **extra: Any) -> Settings:
    return Settings.from_env(
        app_id=getattr(args, "app_id", None),
        bootstrap_servers=getattr(args, "bootstrap", None),
        web_port=getattr(args, "web_port", None),
        data_dir=getattr(args, "data_dir", None),
        **extra,
    )


def run_worker(settings: Settings) -> None:
    from scheduler.http.auth import AuthConfigError
    from scheduler.http.web import register_views
    from scheduler.worker.app import Worker

    try:
        worker = Worker(settings)
        register_views(worker)
    except AuthConfigError as exc:
        print(f"scheduler: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    from scheduler.kafka.broker import wait_for_any
    from scheduler.worker.liveness import LEFT_EXIT_CODE

    def say(text: str) -> None:
        print(f"scheduler: {text}", file=sys.stderr, flush=True)

    if not wait_for_any(settings.bootstrap_servers, settings.startup_wait_s, say):
        say(f"no broker answered at {settings.bootstrap_servers} within {settings.startup_wait_s:.0f} s")
        raise SystemExit(LEFT_EXIT_CODE)  # (a supervisor starts it again: the broker may be back by then)
    try:
        faust_runner(worker.faust_app, settings).execute_from_commandline()
    except SystemExit:
        if worker.liveness.left is not None:  # (a loop stayed stalled: start me again)
            print(f"scheduler: the worker left: {worker.liveness.left}", file=sys.stderr)
            raise SystemExit(LEFT_EXIT_CODE) from None
        raise


def faust_runner(app: Any, settings: Settings) -> Any:
    """The faust.Worker that runs a worker's app, in the configured log format and level."""
    import faust

    logs.quiet_transients()
    runner = faust.Worker(app, **logs.worker_options(settings.log_format, settings.log_level))
    # Faust's terminal spinner: at a level of WARNING or above it sets the root logger to DEBUG (to spin
    # on every record), so every library's debug call builds a LogRecord — ~8 % of a worker's CPU.
    runner.spinner = None
    return runner


def cmd_worker(args: argparse.Namespace) -> None:
    run_worker(_settings(args))


def cmd_launcher(args: argparse.Namespace) -> None:
    """The launcher as its own process: runs the programs of launch requests, reports their states."""
    from scheduler.launcher.launcher import Launcher
    from scheduler.worker.liveness import Liveness

    async def main() -> None:
        settings = _settings(args)
        launcher = Launcher(settings)
        # its launch requests' consumer is watched: stalled, it is replaced (see launcher/launches.py)
        liveness = Liveness(stall_after_s=settings.stall_after_s, leave_after_s=0)
        liveness.watch(launcher.launches)
        watching = asyncio.create_task(liveness.run())
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):  # a clean stop: no more launches, the runs finish
            loop.add_signal_handler(sig, stopping.set)
        taking = asyncio.create_task(launcher.run())
        asked = asyncio.create_task(stopping.wait())
        await asyncio.wait([taking, asked], return_when=asyncio.FIRST_COMPLETED)
        try:
            await launcher.stop()
        finally:
            for task in (taking, asked, watching):
                task.cancel()
            if taking.done() and not taking.cancelled() and taking.exception() is not None:
                raise taking.exception()  # type: ignore[misc]

    asyncio.run(main())


async def _prepare_embedded(settings: Settings, replay: list[tuple[bytes, bytes]]) -> None:
    from scheduler.kafka.producer import BatchedProducer, TopicCreator
    from scheduler.worker.app import partition_for

    await TopicCreator(settings.bootstrap_servers, settings.partitions, 1).ensure(
        settings.commands_topic, settings.light_topic, settings.dead_letter_topic
    )
    producer = BatchedProducer(settings.bootstrap_servers)
    try:
        futures = [
            await producer.send(settings.commands_topic, key, value, partition_for(key, settings.partitions))
            for key, value in replay
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def cmd_run(args: argparse.Namespace) -> None:
    """A broker + one worker + HTTP on one machine: Apache Kafka from its jars (durable) where java and
    mvn are present, else the embedded Tansu broker (memory only; schedules kept by the journal)."""
    from scheduler.kafka.kafka_server import missing_tools

    choice = args.broker
    if choice == "auto":
        missing = missing_tools()
        choice = "tansu" if missing else "kafka"
        why = f"no {' or '.join(missing)} on PATH" if missing else "java and mvn found"
        print(f"scheduler: broker {choice} ({why}; --broker kafka|tansu to choose)", flush=True)
    # `scheduler run` is the local development command: auth is off unless tokens are configured.
    configured = any(
        os.environ.get(v) for v in ("SCHEDULER_AUTH", "SCHEDULER_AUTH_TOKENS", "SCHEDULER_AUTH_TOKENS_FILE")
    )
    settings = _settings(
        args,
        broker_profile=choice,
        launcher="off" if args.no_launcher else "embedded",
        auth=None if configured else "off",
        # one worker and its broker in one process: no other worker to take its partitions over
        leave_after_s=None if os.environ.get("SCHEDULER_LEAVE_AFTER_S") else 0,
    )
    if settings.auth == "off":
        print("scheduler: HTTP auth is OFF (local development; set SCHEDULER_AUTH_TOKENS_FILE to turn it on)")
    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    if choice == "kafka":
        _run_on_kafka(settings, data_dir, args.broker_port)
    else:
        _run_on_tansu(settings, data_dir, args.broker_port)


def _port_taken(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _run_on_kafka(settings: Settings, data_dir: Path, port: int) -> None:
    """Apache Kafka (1 node, KRaft) with its log dirs under the data dir: a restart keeps every topic."""
    from scheduler.kafka.kafka_server import KAFKA_VERSION, KafkaCluster, KafkaUnavailable, jars_cached

    cluster = KafkaCluster(data_dir / "kafka", nodes=1, port=port)
    cluster.stop_stale()
    if _port_taken(port):
        print(
            f"scheduler: port {port} is held by another process; stop it or pass --broker-port",
            file=sys.stderr,
        )
        raise SystemExit(2)
    if not jars_cached():
        print(f"scheduler: fetching Apache Kafka {KAFKA_VERSION}'s jars with mvn (once)", flush=True)
    print(f"scheduler: starting Apache Kafka {KAFKA_VERSION} (log dirs in {cluster.base_dir})", flush=True)
    try:
        cluster.start()
    except KafkaUnavailable as exc:
        print(f"scheduler: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        settings = settings.model_copy(update={"bootstrap_servers": cluster.bootstrap_servers})
        print(
            f"scheduler: broker {cluster.bootstrap_servers}, HTTP {settings.web_url}, "
            f"commands topic {settings.commands_topic}",
            flush=True,
        )
        run_worker(settings)
    finally:
        cluster.stop()


def _run_on_tansu(settings: Settings, data_dir: Path, port: int) -> None:
    """The embedded Tansu broker: memory only, so schedules are kept by the journal and replayed."""
    from scheduler.kafka.broker import EmbeddedBroker, TansuGrowthWatch
    from scheduler.worker.journal import compact_journal

    if _port_taken(port):
        print(
            f"scheduler: port {port} is held by another process; stop it or pass --broker-port",
            file=sys.stderr,
        )
        raise SystemExit(2)
    journal = settings.journal_path or data_dir / "journal.bin"
    broker = EmbeddedBroker(port=port, log_path=data_dir / "broker.log").start()
    watch = TansuGrowthWatch(broker).start()
    try:
        settings = settings.model_copy(
            update={"bootstrap_servers": broker.bootstrap_servers, "journal_path": journal}
        )
        # The fresh in-memory broker has no changelogs: local table state from an earlier run is stale.
        shutil.rmtree(data_dir / settings.app_id, ignore_errors=True)
        replay = compact_journal(journal)
        asyncio.run(_prepare_embedded(settings, replay))
        print(
            f"scheduler: broker {broker.bootstrap_servers} (embedded Tansu, memory only), HTTP "
            f"{settings.web_url}, commands topic {settings.commands_topic}, {plural(len(replay), 'schedule')} "
            f"restored from {journal}",
            flush=True,
        )
        run_worker(settings)
    finally:
        watch.stop()
        broker.stop()


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


async def _tail(args: argparse.Namespace) -> None:
    from scheduler.client.kafka import RecordReader
    from scheduler.wire.codec import avro_dir

    known = sorted(p.stem for p in avro_dir().glob("*.avsc"))
    if args.schema not in known:
        raise ValueError(f"--schema: no schema {args.schema!r}; one of {', '.join(known)}")
    settings = _settings(args)
    reader = RecordReader(
        settings.bootstrap_servers,
        args.topic,
        schema=args.schema,
        profile=settings.broker_profile,  # on Kafka, committed records only: a fenced zombie's fires never show
        from_beginning=args.from_beginning,
    )
    shown = 0
    async with reader:
        async for record in reader.records():
            shown_value: Any = (
                record.value if record.error is None else {"undecodable": record.error, "value": record.raw}
            )
            print(json.dumps(_jsonable(shown_value), ensure_ascii=False), flush=True)
            shown += 1
            if args.max and shown >= args.max:
                break


def cmd_tail(args: argparse.Namespace) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_tail(args))


# --- client commands: the HTTP API from the command line -------------------------------------------

ClientCommand = Callable[["HttpClient", argparse.Namespace], Awaitable[int | None]]


def _with_client(command: ClientCommand) -> Callable[[argparse.Namespace], int]:
    """Run `command` with a client of --url / $SCHEDULER_URL; exit 0 ok, 1 API error, 2 usage error."""

    def run(args: argparse.Namespace) -> int:
        from scheduler.cli.client import UsageError
        from scheduler.client.http import DEFAULT_URL, ApiError, HttpClient

        url = getattr(args, "url", None) or os.environ.get("SCHEDULER_URL") or DEFAULT_URL
        token = getattr(args, "token", None) or os.environ.get("SCHEDULER_TOKEN") or None

        async def go() -> int | None:
            async with HttpClient(
                url,
                token,
                timeout_s=args.timeout,
                concurrency=getattr(args, "concurrency", 1),
                wait_applied=not getattr(args, "no_wait", False),
            ) as client:
                return await command(client, args)

        try:
            return asyncio.run(go()) or 0
        except UsageError as exc:
            print(f"scheduler: error: {exc}", file=sys.stderr)
            return 2
        except ApiError as exc:
            print(
                "\n".join(f"scheduler: {line}" if i == 0 else line for i, line in enumerate(exc.lines())),
                file=sys.stderr,
            )
            return 1
        except KeyboardInterrupt:
            print("scheduler: interrupted", file=sys.stderr)
            return 130

    return run


def _print(args: argparse.Namespace, data: Any, text: str | None) -> None:
    """`data` as JSON with --json, else the readable `text`."""
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
    elif text:
        print(text)


def _instant(text: str | None) -> int | None:
    from scheduler.cli.client import parse_instant

    return None if text is None else parse_instant(text)


def _accepted(answer: Any, what: str) -> str:
    action = answer.get("action") if isinstance(answer, dict) else None
    if isinstance(answer, dict) and answer.get("applied"):
        version = answer.get("version") if action not in ("RUN", "BACKFILL") else None
        return f"{what}: {action} applied" + (f" (version {version})" if version is not None else "")
    return f"{what}: {action or 'request'} accepted"


async def cmd_schedules_create(client: HttpClient, args: argparse.Namespace) -> int:
    from scheduler.cli.client import (
        UsageError,
        load_document,
        objects_of,
        schedule_body,
        validate_locally,
    )
    from scheduler.cli.render import ProgressLine
    from scheduler.client.http import schedule_label

    if args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    bodies = [schedule_body(o) for o in objects_of(load_document(args.file), "schedules", args.file)]
    if args.dry_run:
        invalid: list[dict[str, Any]] = [
            {"index": i, "key": schedule_label(b), "fields": problems}
            for i, b in enumerate(bodies)
            if (problems := validate_locally(b))
        ]
        _print(
            args,
            {"total": len(bodies), "valid": len(bodies) - len(invalid), "invalid": invalid},
            f"{len(bodies) - len(invalid)} of {plural(len(bodies), 'schedule')} valid (nothing sent)",
        )
        for bad in invalid:
            print(f"  #{bad['index']} {bad['key']}:", file=sys.stderr)
            for f in bad["fields"]:
                print(f"    {f['field']}: {f['message']}", file=sys.stderr)
        return 1 if invalid else 0
    progress = ProgressLine(sys.stderr.write, sys.stderr.isatty()) if len(bodies) > 1 else None
    result = await client.create_many(bodies, args.concurrency, progress)
    if progress is not None:
        progress(result, final=True)
    failed = [
        {
            "index": i,
            "key": key,
            "status": exc.status,
            "error": exc.error,
            "reason": exc.reason,
            "fields": exc.fields,
        }
        for i, key, exc in result.failures
    ]
    _print(
        args,
        {"total": result.total, "accepted": result.accepted, "applied": result.applied, "failed": failed,
         "seconds": result.seconds},
        f"accepted {result.accepted} of {plural(result.total, 'schedule')} in {result.seconds:.1f} s "
        f"({result.rate:,.0f}/s)"
        + {True: ", all applied", False: f", not all applied within {args.timeout:g} s", None: ""}[result.applied]
        + (f", {len(failed)} failed" if failed else ""),
    )  # fmt: skip
    if result.applied is False:
        print("scheduler: the writes are accepted and will be applied; reads may not show them yet",
              file=sys.stderr)  # fmt: skip
    if result.failures:
        print(f"scheduler: {len(result.failures)} of {result.total} failed:", file=sys.stderr)
        for i, key, exc in result.failures:
            lines = exc.lines()
            print(f"  #{i} {key}: {lines[0]}", file=sys.stderr)
            for line in lines[1:]:
                print(f"  {line}", file=sys.stderr)
    return 1 if result.failures or result.applied is False else 0


async def cmd_schedules_list(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.render import iso, paused_text, table, trigger_summary

    filters = {
        "label": args.label,
        "trigger": args.trigger,
        "program": args.program,
        "topic": args.topic,
        "paused": "true" if args.paused else None,
        "finished": "true" if args.finished else None,
        "enabled": {True: "true", False: "false", None: None}[args.enabled],
        "nextBefore": None if args.next_before is None else str(_instant(args.next_before)),
        "nextAfter": None if args.next_after is None else str(_instant(args.next_after)),
    }
    if args.all:
        answer = {"schedules": [s async for s in client.all_schedules(args.tenant, args.limit, **filters)]}
    else:
        answer = await client.schedules(args.tenant, args.limit, args.cursor, **filters)
    schedules = answer["schedules"]
    rows = [
        (
            s["key"],
            _enabled_text(s, paused_text),
            trigger_summary(s),
            iso(s.get("nextFireAt")),
            s.get("program") or s["topic"],
        )
        for s in schedules
    ]
    _print(args, answer, table(["KEY", "ENABLED", "TRIGGER", "NEXT FIRE (UTC)", "PROGRAM / TOPIC"], rows))
    if not args.json and answer.get("next"):
        print(
            f"({len(schedules)} of {answer['total']}; the next page: --cursor {answer['next']}, all: --all)",
            file=sys.stderr,
        )


def _enabled_text(s: dict[str, Any], paused_text: Callable[..., str]) -> Any:
    """A list's ENABLED cell: finished, paused (why), or enabled (yes/no), with the fires a limited one
    has left."""
    if s.get("finished"):
        return "finished"
    if s.get("paused") is not None:
        return paused_text(s["paused"], short=True)
    left = s.get("firesLeft")
    return s["enabled"] if left is None else f"{'yes' if s['enabled'] else 'no'} ({left} fires left)"


async def cmd_schedules_get(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_schedule_ref
    from scheduler.cli.render import fields_table, paused_text

    answer = await client.schedule(*parse_schedule_ref(args.schedule))
    times = ("createdAt", "updatedAt", "activeSince", "nextFireAt")
    shown = {**answer, "paused": None if answer.get("paused") is None else paused_text(answer["paused"])}
    _print(args, answer, fields_table(shown, times))


async def cmd_schedules_update(client: HttpClient, args: argparse.Namespace) -> int:
    from scheduler.cli.client import (
        UsageError,
        load_document,
        objects_of,
        parse_schedule_ref,
        schedule_body,
        validate_locally,
    )

    tenant, name = parse_schedule_ref(args.schedule)
    items = objects_of(load_document(args.file), "schedules", args.file)
    if len(items) != 1:
        raise UsageError(f"{args.file}: update takes one schedule, the file holds {len(items)}")
    body = schedule_body(items[0])
    for field, value in (("tenant", tenant), ("name", name)):
        if body.pop(field, value) != value:
            raise UsageError(
                f"{args.file}: {field} {items[0][field]!r} is not the {field} of {args.schedule}"
            )
    if args.dry_run:
        problems = validate_locally(body, with_key=False)
        _print(
            args,
            {"valid": not problems, "fields": problems},
            "valid (nothing sent)" if not problems else "invalid",
        )
        for f in problems:
            print(f"  {f['field']}: {f['message']}", file=sys.stderr)
        return 1 if problems else 0
    answer = await client.update(tenant, name, body)
    _print(args, answer, _accepted(answer, args.schedule))
    return 0


def _schedule_action(action: str) -> ClientCommand:
    async def command(client: HttpClient, args: argparse.Namespace) -> None:
        from scheduler.cli.client import parse_schedule_ref

        tenant, name = parse_schedule_ref(args.schedule)
        if action == "delete":
            answer = await client.delete(tenant, name)
        elif action == "disable":
            answer = await client.disable(tenant, name, args.note, _instant(args.until))
        else:
            answer = await client.action(tenant, name, action)
        _print(args, answer, _accepted(answer, args.schedule))

    return command


async def cmd_schedules_next(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import UsageError, parse_schedule_ref
    from scheduler.cli.render import iso, table

    if args.n < 1:
        raise UsageError("-n must be at least 1")
    tenant, name = parse_schedule_ref(args.schedule)
    answer = await client.schedule(tenant, name, "next", n=args.n)
    if not answer["next"]:
        text = f"{args.schedule} has no time trigger: it fires on events only"
    elif answer.get("specs"):  # (an AND/OR: which of its time triggers each instant comes from)
        words = answer.get("specTexts") or {}
        rows = [
            (i + 1, iso(t), t, "; ".join(f"{p} {words.get(p, '')}".strip() for p in specs))
            for i, (t, specs) in enumerate(zip(answer["next"], answer["specs"], strict=False))
        ]
        text = table(["#", "FIRE TIME (UTC)", "EPOCH MS", "FROM"], rows)
    else:
        text = table(
            ["#", "FIRE TIME (UTC)", "EPOCH MS"], [(i + 1, iso(t), t) for i, t in enumerate(answer["next"])]
        )
    if answer["next"] and not answer.get("enabled", True):
        text = f"{args.schedule} is disabled; when enabled it would fire at:\n{text}"
    _print(args, {**answer, "nextIso": [iso(t) for t in answer["next"]]}, text)


async def cmd_schedules_history(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_schedule_ref
    from scheduler.cli.render import iso, table

    tenant, name = parse_schedule_ref(args.schedule)
    answer = await client.schedule(tenant, name, "history")

    def changed(v: dict[str, Any]) -> str:
        text = ", ".join(v["changed"]) or "-"
        if v.get("until") is not None:  # (a pause's end; an ENABLE: the pause it ended)
            text += f"; until {iso(v['until'])}"
        return text + (f"; note: {v['note']}" if v.get("note") else "")

    rows = [(v["version"], iso(v["at"]), v["by"], v["action"], changed(v)) for v in answer["versions"]]
    _print(args, answer, table(["VERSION", "AT (UTC)", "BY", "ACTION", "CHANGED"], rows))


async def cmd_schedules_rollback(client: HttpClient, args: argparse.Namespace) -> None:
    """PUT the definition a version of the schedule had, over the version it is at now (If-Match)."""
    from scheduler.cli.client import UsageError, parse_schedule_ref

    tenant, name = parse_schedule_ref(args.schedule)
    versions = (await client.schedule(tenant, name, "history"))["versions"]
    target = next((v for v in versions if v["version"] == args.to and v["schedule"] is not None), None)
    if target is None:
        known = sorted({v["version"] for v in versions if v["schedule"] is not None})
        raise UsageError(f"{args.schedule} has no version {args.to} in its history (it has {known})")
    current = await client.schedule(tenant, name)
    answer = await client.update(tenant, name, target["schedule"], if_version=current["version"])
    text = (
        f"{args.schedule}: back to the definition of version {args.to} (as version {current['version'] + 1})"
    )
    _print(args, answer, text)


def _calendar_text(c: dict[str, Any]) -> str:
    days = [*c["dates"], *(f"{r['from']}..{r['to']}" for r in c["ranges"]), *c["weekdays"]]
    return f"{c['tenant']}/{c['name']} ({c['timezone']}): {', '.join(days) or 'no day'}"


async def cmd_calendars_put(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import UsageError, load_document, parse_list, parse_schedule_ref

    tenant, name = parse_schedule_ref(args.calendar)
    body: dict[str, Any] = dict(load_document(args.file)) if args.file else {}
    if args.timezone:
        body["timezone"] = args.timezone
    if args.dates:
        body["dates"] = parse_list(args.dates)
    for text in args.ranges:
        start, sep, end = text.partition("..")
        if not sep:
            raise UsageError(f"--range {text!r}: expected FROM..TO")
        body.setdefault("ranges", []).append({"from": start, "to": end})
    if args.weekdays:
        body["weekdays"] = [w.upper() for w in parse_list(args.weekdays)]
    answer = await client.request("PUT", f"/calendars/{tenant}/{name}", body=body)
    _print(args, answer, f"{tenant}/{name}: PUT accepted")


async def cmd_calendars_list(client: HttpClient, args: argparse.Namespace) -> None:
    answer = await client.request("GET", "/calendars", params={"tenant": args.tenant})
    _print(args, answer, "\n".join(_calendar_text(c) for c in answer["calendars"]) or "no calendars")


async def cmd_calendars_get(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_schedule_ref

    tenant, name = parse_schedule_ref(args.calendar)
    answer = await client.request("GET", f"/calendars/{tenant}/{name}")
    _print(args, answer, _calendar_text(answer))


async def cmd_calendars_delete(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_schedule_ref

    tenant, name = parse_schedule_ref(args.calendar)
    answer = await client.request("DELETE", f"/calendars/{tenant}/{name}")
    _print(args, answer, f"{tenant}/{name}: DELETE accepted")


async def cmd_schedules_run(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_instant, parse_payload, parse_schedule_ref

    tenant, name = parse_schedule_ref(args.schedule)
    body: dict[str, Any] = {"at": parse_instant(args.at)} if args.at else {}
    if args.arguments:
        body["arguments"] = parse_payload(args.arguments)
    answer = await client.action(tenant, name, "run", body or None)
    _print(args, answer, _accepted(answer, args.schedule))


async def cmd_schedules_backfill(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import UsageError, parse_instant, parse_schedule_ref
    from scheduler.cli.render import iso

    tenant, name = parse_schedule_ref(args.schedule)
    start, end = parse_instant(args.from_), parse_instant(args.to)
    if end < start:
        raise UsageError(f"--to ({iso(end)}) is before --from ({iso(start)})")
    answer = await client.action(tenant, name, "backfill", {"from": start, "to": end})
    fires = answer.get("fires") if isinstance(answer, dict) else None
    text = _accepted(answer, args.schedule) + (
        f": {plural(fires, 'fire')} from {iso(start)} to {iso(end)}" if fires is not None else ""
    )
    _print(args, answer, text)


async def cmd_jobs_cancel(client: HttpClient, args: argparse.Namespace) -> None:
    answer = await client.cancel_job(args.job_id)
    _print(args, answer, f"{answer['jobId']}: cancel accepted (its outcome: CANCELLED, in jobs list)")


async def cmd_jobs_list(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.render import iso, table

    limit = None if args.limit is None else str(args.limit)
    answer = await client.jobs(
        schedule=args.schedule, program=args.program, state=args.state, limit=limit, cursor=args.cursor
    )
    jobs, recent = answer.get("jobs", []), answer.get("recent", [])
    text = (
        table(
            ["JOB", "STATE", "PROGRAM", "BLOCKED BY", "CHECK AT (UTC)", "REASON"],
            [
                (
                    j["jobId"],
                    j["state"],
                    j["program"],
                    j.get("blockedBy") or None,
                    iso(j["checkAt"]) if j.get("checkAt") else None,
                    j.get("reason") or None,
                )
                for j in jobs
            ],
        )
        if jobs
        else "no pending jobs"
    )
    if recent:
        text += "\n\nrecent outcomes:\n" + table(
            ["AT (UTC)", "JOB", "OUTCOME", "REASON"],
            [(iso(o.get("at")), o.get("jobId"), o.get("outcome"), o.get("reason")) for o in recent],
        )
    _print(args, answer, text)
    if not args.json and answer.get("next"):
        print(f"({plural(len(jobs), 'job')}; the next page: --cursor {answer['next']})", file=sys.stderr)


async def cmd_jobs_why(client: HttpClient, args: argparse.Namespace) -> None:
    """Why a schedule's program has not launched: its trigger's progress and its pending jobs, in words."""
    import time

    from scheduler.cli.client import parse_schedule_ref
    from scheduler.cli.render import explain_job, explain_trigger, iso

    tenant, name = parse_schedule_ref(args.schedule)
    key = f"{tenant}/{name}"
    schedule = await client.schedule(tenant, name)
    progress = await client.schedule(tenant, name, "trigger")
    jobs = await client.jobs(schedule=key)
    pending, recent = jobs.get("jobs", []), jobs.get("recent", [])
    now = time.time_ns() // 1_000_000
    lines: list[str] = []
    if not schedule.get("program"):
        lines.append(
            f"{key} has no program: it fires tasks to topic {schedule['topic']} and never has jobs"
            + (f"; next fire {iso(schedule['nextFireAt'])}" if schedule.get("nextFireAt") else "")
        )
    elif not schedule["enabled"]:
        lines.append(
            f"{key} is disabled: events do not count toward its trigger and nothing launches until it is enabled"
        )
    else:
        lines.append(
            f"{key} launches {schedule['program']}; {plural(progress.get('jobsCreated', 0), 'job')} created "
            f"by its current definition (version {progress.get('version')})"
        )
    trigger = progress.get("trigger") or {}
    state = "satisfied" if trigger.get("satisfied") else "waiting (PENDING_TRIGGER)"
    lines.append(f"trigger: {state}")
    lines += ["  " + line for line in explain_trigger(trigger)]
    if pending:
        lines.append(f"pending jobs: {len(pending)}")
        lines += ["  " + explain_job(j, now) for j in pending]
    elif schedule.get("program"):
        lines.append("pending jobs: none (nothing waits on a constraint)")
    if recent:
        lines.append("recent outcomes:")
        lines += [
            f"  {iso(o.get('at'))} {o.get('jobId')} {o.get('outcome')}: {o.get('reason')}" for o in recent
        ]
    _print(
        args, {"schedule": schedule, "trigger": progress, "jobs": pending, "recent": recent}, "\n".join(lines)
    )


async def cmd_runs_list(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_program
    from scheduler.cli.render import iso, table

    answer = await client.runs(parse_program(args.program), args.status)
    rows = [
        (
            r["run_id"],
            r["status"],
            r.get("schedule") or None,
            iso(r.get("created_at")),
            iso(r.get("started_at")),
            iso(r.get("ended_at")),
            (r.get("error") or "")[-80:] or None,
        )
        for r in answer["runs"]
    ]
    headers = ["RUN", "STATUS", "SCHEDULE", "CREATED (UTC)", "STARTED", "ENDED", "ERROR"]
    _print(args, answer, table(headers, rows) if rows else f"no runs of {args.program}")


async def cmd_runs_status(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_program
    from scheduler.cli.render import iso

    answer = await client.program_status(parse_program(args.program))
    lines = [f"{args.program}: {answer['status']}"]
    for run in answer.get("activeRuns", []):
        lines.append(f"  active: {run['runId']} {run['status']}")
    last = answer.get("lastRun")
    if last:
        ended = f", ended {iso(last['ended_at'])}" if last.get("ended_at") else ""
        lines.append(f"  last run: {last['run_id']} {last['status']}{ended}")
        if last.get("error"):
            lines.append(f"  error: {last['error'][-200:]}")
    _print(args, answer, "\n".join(lines))


#: what `scheduler runs stop|suspend|resume` prints once the request is accepted
RUN_ACTION_WORDS = {
    "stop": "stop requested (STOPPING, then STOPPED)",
    "suspend": "suspend requested (SUSPENDING, then SUSPENDED)",
    "resume": "resume requested (RESUMING, then RUNNING)",
}


async def cmd_runs_control(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_program

    answer = await client.control_run(parse_program(args.program), args.run_id, args.subcommand)
    _print(args, answer, f"{args.run_id}: {RUN_ACTION_WORDS[args.subcommand]}")


async def cmd_events_publish(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import (
        UsageError,
        load_document,
        objects_of,
        parse_instant,
        parse_payload,
    )
    from scheduler.cli.render import iso, table
    from scheduler.client.http import ApiError

    if args.file and (args.type or args.payload):
        raise UsageError("give either TYPE key=value... or -f FILE, not both")
    if args.file:
        events = objects_of(load_document(args.file), "events", args.file)
    elif args.type:
        events = [{"eventType": args.type, "payload": parse_payload(args.payload)}]
    else:
        raise UsageError("give TYPE key=value... or -f FILE")
    if args.timestamp:
        at = parse_instant(args.timestamp)
        events = [{**e, "timestamp": e.get("timestamp", at)} for e in events]
    answers = []
    for i, event in enumerate(events):
        try:
            answers.append(await client.publish(event))
        except ApiError as exc:
            if len(events) > 1:
                exc.request += f" (event #{i}; the {i} before it were published)"
            raise
    _print(
        args,
        answers if args.file else answers[0],
        table(["EVENT KEY", "TIMESTAMP (UTC)"], [(a["eventKey"], iso(a.get("timestamp"))) for a in answers]),
    )


async def cmd_messages_send(client: HttpClient, args: argparse.Namespace) -> None:
    from pathlib import Path

    from scheduler.cli.client import UsageError, parse_instant, parse_payload
    from scheduler.cli.render import iso

    if args.value is not None and args.file:
        raise UsageError("give either --value or -f FILE, not both")
    value: str | bytes | None = Path(args.file).read_bytes() if args.file else args.value
    at = parse_instant(args.at)
    answer = await client.send_at(
        args.id, args.topic, value, at, key=args.key, headers=parse_payload(args.header)
    )
    _print(args, answer, f"{args.id}: delivered to {args.topic} at {iso(at)}")


async def cmd_messages_get(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.render import iso

    m = await client.message(args.id)
    _print(
        args, m, f"{m['id']}: pending, to {m['topic']} at {iso(m['deliverAt'])} (key {m['key'] or m['id']})"
    )


async def cmd_messages_list(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.render import iso, table

    due_before = _instant(args.due_before)
    if args.all:
        answer = {"messages": [m async for m in client.all_messages(due_before, args.topic, args.limit)]}
    else:
        answer = await client.messages(due_before, args.topic, args.limit, args.cursor)
    rows = [(m["id"], iso(m["deliverAt"]), m["topic"], m["key"] or m["id"]) for m in answer["messages"]]
    _print(args, answer, table(["ID", "DELIVER AT (UTC)", "TOPIC", "KEY"], rows))
    if not args.json and answer.get("next"):
        print(f"(the next page: --cursor {answer['next']}, all: --all)", file=sys.stderr)


async def cmd_messages_cancel(client: HttpClient, args: argparse.Namespace) -> None:
    _print(args, await client.cancel(args.id), f"{args.id}: cancelled (if it was pending)")


def cmd_token_new(args: argparse.Namespace) -> int:
    """A fresh random token, printed once, and the tokens-file entry that holds only its SHA-256."""
    from scheduler.cli.client import parse_list
    from scheduler.http import auth

    scopes, tenants = parse_list(args.scopes), parse_list(args.tenants)
    problems = []
    if not scopes or not set(scopes) <= auth.SCOPES:
        problems.append(f"--scopes: a comma-separated list of {', '.join(sorted(auth.SCOPES))}")
    if not tenants:
        problems.append("--tenants: a comma-separated list of tenants, or '*' for all of them")
    if not args.name.strip():
        problems.append("--name: must not be empty")
    if problems:
        print("\n".join(f"scheduler: error: {p}" for p in problems), file=sys.stderr)
        return 2
    token = auth.new_token()
    entry = {"name": args.name, "sha256": auth.hash_token(token), "scopes": scopes, "tenants": tenants}

    def flow(items: list[str]) -> str:  # JSON strings are YAML scalars: '*' and odd names stay quoted
        return "[" + ", ".join(json.dumps(i) for i in items) + "]"

    yaml_entry = (
        f"  - name: {json.dumps(args.name)}\n    sha256: {entry['sha256']}\n"
        f"    scopes: {flow(scopes)}\n    tenants: {flow(tenants)}"
    )
    _print(
        args,
        {"token": token, "entry": entry},
        f"token (shown once; give it to its user, store it nowhere else):\n{token}\n\n"
        f"add to the tokens file (SCHEDULER_AUTH_TOKENS_FILE), under `tokens:`:\n{yaml_entry}",
    )
    return 0


def _add_client_commands(sub: Any) -> None:
    """The client commands' argparse tree; every leaf takes --url, --token, --json, --timeout."""
    client = argparse.ArgumentParser(add_help=False)
    client.add_argument(
        "--url", help="the scheduler's HTTP API (default: $SCHEDULER_URL or http://127.0.0.1:6066)"
    )
    client.add_argument("--token", help="bearer token (default: $SCHEDULER_TOKEN)")
    client.add_argument("--json", action="store_true", help="machine-readable JSON output")
    client.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    client.add_argument(
        "--no-wait",
        action="store_true",
        help="a schedule write returns once its command is on the commands topic (202), not once the "
        "worker owning it has applied it",
    )

    def leaf(group: Any, name: str, command: ClientCommand, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = group.add_parser(name, parents=[client], help=help, description=help)
        p.set_defaults(func=_with_client(command))
        return p

    def ref(p: argparse.ArgumentParser) -> None:
        p.add_argument("schedule", metavar="TENANT/NAME")

    def program(p: argparse.ArgumentParser) -> None:
        p.add_argument("program", metavar="PROGRAM", help="namespace/application/type/name")

    schedules = sub.add_parser("schedules", help="create, list, change and fire schedules (HTTP API)")
    group = schedules.add_subparsers(dest="subcommand", required=True)
    p = leaf(group, "create", cmd_schedules_create, "create schedules from a YAML/JSON file (bulk import)")
    p.add_argument(
        "-f", "--file", required=True, help="one schedule, a list, or {schedules: [...]}; '-': stdin"
    )
    p.add_argument("--dry-run", action="store_true", help="validate locally, send nothing")
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight (default 16)")
    p = leaf(group, "list", cmd_schedules_list, "list schedules")
    p.add_argument("--tenant")
    p.add_argument("--limit", type=int, help="at most this many (server default 1000, max 10000)")
    p.add_argument("--cursor", help="the page after this cursor (the `next` of the page before)")
    p.add_argument("--all", action="store_true", help="every page, one after the other (--limit: per page)")
    p.add_argument(
        "--label",
        metavar="SELECTOR",
        help="only those whose labels match: team=data,tier!=bronze,critical,!old",
    )
    p.add_argument(
        "--trigger", metavar="KIND", help="only those whose trigger is of this kind (cron, frequency, and, …)"
    )
    p.add_argument("--program", help="only those that launch this program")
    p.add_argument("--topic", help="only those that fire to this topic")
    p.add_argument("--paused", action="store_true", help="only those paused by a disable")
    p.add_argument(
        "--finished", action="store_true", help="only the finished ones (notAfter, maxFires, once)"
    )
    when = "ISO-8601, epoch ms, or +30m, +2h, +1d"
    p.add_argument(
        "--next-before", metavar="WHEN", help=f"only those whose next fire is at or before it: {when}"
    )
    p.add_argument(
        "--next-after", metavar="WHEN", help=f"only those whose next fire is at or after it: {when}"
    )
    on = p.add_mutually_exclusive_group()
    on.add_argument(
        "--enabled", dest="enabled", action="store_const", const=True, help="only the enabled ones"
    )
    on.add_argument(
        "--disabled", dest="enabled", action="store_const", const=False, help="only the disabled ones"
    )
    ref(leaf(group, "get", cmd_schedules_get, "show one schedule"))
    p = leaf(group, "update", cmd_schedules_update, "replace a schedule's definition (PUT)")
    ref(p)
    p.add_argument("-f", "--file", required=True, help="the schedule (tenant/name may be omitted)")
    p.add_argument("--dry-run", action="store_true", help="validate locally, send nothing")
    for action in ("delete", "enable"):
        ref(leaf(group, action, _schedule_action(action), f"{action} a schedule"))
    p = leaf(group, "disable", _schedule_action("disable"), "disable (pause) a schedule, with a note")
    ref(p)
    p.add_argument("--note", help="why it is paused (shown by get, list, history and the admin page)")
    p.add_argument("--until", help="enable it again then, by itself: ISO-8601, epoch ms, or +30m, +2h, +1d")
    p = leaf(group, "next", cmd_schedules_next, "the next fire times (ISO-8601 UTC and epoch ms)")
    ref(p)
    p.add_argument("-n", type=int, default=10, help="how many (default 10)")
    p = leaf(group, "history", cmd_schedules_history, "every change of a schedule: who, when, what")
    ref(p)
    p = leaf(group, "rollback", cmd_schedules_rollback, "put back the definition of an earlier version")
    ref(p)
    p.add_argument("--to", type=int, required=True, metavar="VERSION", help="the version to go back to")
    p = leaf(group, "run", cmd_schedules_run, "fire a schedule now (or at --at), with runtime arguments")
    ref(p)
    p.add_argument("--at", help="the instant to fire it as (ISO-8601 or epoch ms; default now)")
    p.add_argument(
        "--arg",
        dest="arguments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a runtime argument, over the schedule's data (a program's job arguments, a fire's data); repeat it",
    )
    p = leaf(group, "backfill", cmd_schedules_backfill, "fire every due instant in a range")
    ref(p)
    p.add_argument("--from", dest="from_", required=True, help="ISO-8601 (naive = UTC) or epoch ms")
    p.add_argument("--to", required=True, help="ISO-8601 (naive = UTC) or epoch ms, included")

    backfills.register(sub, leaf)

    jobs = sub.add_parser("jobs", help="pending jobs and why they wait (HTTP API)")
    group = jobs.add_subparsers(dest="subcommand", required=True)
    p = leaf(group, "list", cmd_jobs_list, "pending jobs and recent outcomes")
    p.add_argument("--schedule", metavar="TENANT/NAME")
    p.add_argument("--program", metavar="PROGRAM")
    p.add_argument(
        "--state", help="PENDING_CONSTRAINT, PENDING_CAP, PENDING_LAUNCH, or an outcome (SKIP, DISCARD, ...)"
    )
    p.add_argument("--limit", type=int, help="at most this many jobs (the API's default: 1,000)")
    p.add_argument("--cursor", help="the page after this one (as the previous page printed it)")
    ref(leaf(group, "why", cmd_jobs_why, "why a schedule's program has not launched"))
    p = leaf(group, "cancel", cmd_jobs_cancel, "cancel a pending job (a launched one is a run: runs stop)")
    p.add_argument("job_id", metavar="JOB_ID", help="as jobs list shows it (tenant/name@...)")

    runs = sub.add_parser("runs", help="a program's runs (HTTP API)")
    group = runs.add_subparsers(dest="subcommand", required=True)
    p = leaf(group, "list", cmd_runs_list, "a program's run records (the last 100)")
    program(p)
    p.add_argument("--status", help="only runs in this status (RUNNING, COMPLETED, FAILED, ...)")
    program(leaf(group, "status", cmd_runs_status, "a program's status: its active runs or its last run"))
    for action, what in (
        ("stop", "stop a run"),
        ("suspend", "suspend a RUNNING run"),
        ("resume", "resume a SUSPENDED run"),
    ):
        p = leaf(group, action, cmd_runs_control, what)
        program(p)
        p.add_argument("run_id", metavar="RUN_ID")

    calendars = sub.add_parser(
        "calendars", help="exclusion calendars: holidays, freezes, weekends (HTTP API)"
    )
    group = calendars.add_subparsers(dest="subcommand", required=True)
    p = leaf(
        group, "put", cmd_calendars_put, "create or replace a calendar (schedules that exclude it follow)"
    )
    p.add_argument("calendar", metavar="TENANT/NAME")
    p.add_argument("-f", "--file", help="the calendar as YAML/JSON: timezone, dates, ranges, weekdays")
    p.add_argument("--timezone", help="the zone its days are local to (default UTC)")
    p.add_argument("--dates", help="YYYY-MM-DD,YYYY-MM-DD,...")
    p.add_argument(
        "--range",
        dest="ranges",
        action="append",
        default=[],
        metavar="FROM..TO",
        help="days FROM to TO, both included; repeat it",
    )
    p.add_argument("--weekdays", help="MON,...,SUN")
    p = leaf(group, "list", cmd_calendars_list, "the calendars")
    p.add_argument("--tenant")
    for name, command, what in (
        ("get", cmd_calendars_get, "a calendar"),
        ("delete", cmd_calendars_delete, "delete a calendar"),
    ):
        leaf(group, name, command, what).add_argument("calendar", metavar="TENANT/NAME")

    events = sub.add_parser("events", help="publish events (HTTP API)")
    group = events.add_subparsers(dest="subcommand", required=True)
    p = leaf(group, "publish", cmd_events_publish, "publish an event: TYPE key=value..., or -f FILE")
    p.add_argument("type", nargs="?", metavar="TYPE", help="partition, data, program-status")
    p.add_argument("payload", nargs="*", metavar="key=value")
    p.add_argument(
        "-f", "--file", help="one event ({eventType, payload, timestamp?}), a list, or {events: [...]}"
    )
    p.add_argument("--timestamp", help="event time (ISO-8601 or epoch ms; default: the server's now)")

    messages = sub.add_parser(
        "messages", help="delayed messages: a record delivered to a topic later (HTTP API)"
    )
    group = messages.add_subparsers(dest="subcommand", required=True)
    p = leaf(
        group,
        "send",
        cmd_messages_send,
        "deliver a record to a topic at an instant (the same id replaces it)",
    )
    p.add_argument("id", metavar="ID", help="the message id (cancel and replace by it)")
    p.add_argument("topic", metavar="TOPIC", help="where it is delivered")
    p.add_argument(
        "--at", required=True, help="ISO-8601 (naive = UTC), epoch ms, or from now: +30s, +5m, +2h"
    )
    p.add_argument("--key", help="the delivered record's key (default: the id)")
    p.add_argument("--value", help="the value, as text")
    p.add_argument("-f", "--file", help="the value, as the bytes of this file")
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a header delivered with it; repeat it",
    )
    p = leaf(group, "list", cmd_messages_list, "the messages pending, due first")
    p.add_argument(
        "--due-before", metavar="WHEN", help="only those due by then: ISO-8601, epoch ms, +30m, +2h"
    )
    p.add_argument("--topic", help="only those delivered to this topic")
    p.add_argument("--limit", type=int, help="at most this many a page (default 100)")
    p.add_argument("--cursor", help="the page after this one (the `next` of the previous page)")
    p.add_argument("--all", action="store_true", help="every page")
    for name, command, what in (
        ("get", cmd_messages_get, "a pending message"),
        ("cancel", cmd_messages_cancel, "cancel a pending message"),
    ):
        leaf(group, name, command, what).add_argument("id", metavar="ID")

    token = sub.add_parser("token", help="API tokens")
    group = token.add_subparsers(dest="subcommand", required=True)
    p = group.add_parser("new", help="a fresh random token and its tokens-file entry")
    p.add_argument("--name", required=True, help="who uses it (shown in logs)")
    p.add_argument("--scopes", default="sched:r", help="comma-separated: sched:r, sched:w (default sched:r)")
    p.add_argument("--tenants", required=True, help="comma-separated tenants, or '*' for all")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_token_new)


#: commands that run until stopped, and log (with tracebacks) what fails in them
SERVERS = frozenset({"worker", "launcher", "run", "demo"})


def build_parser() -> argparse.ArgumentParser:
    """Every command and its options (the docs site's CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(prog="scheduler", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS)")
        p.add_argument("--app-id", help="app id: names topics, tables and the consumer group")

    p = sub.add_parser("worker", help="run a worker against a Kafka cluster (config from SCHEDULER_* env)")
    common(p)
    p.add_argument("--web-port", type=int)
    p.add_argument("--data-dir", type=Path)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("launcher", help="run the programs of launch requests (config from SCHEDULER_* env)")
    common(p)
    p.add_argument("--data-dir", type=Path)
    p.set_defaults(func=cmd_launcher)

    p = sub.add_parser("run", help="a broker + one worker (with its launcher) + HTTP, for one machine")
    p.add_argument("--no-launcher", action="store_true", help="do not run programs in this process")
    p.add_argument("--app-id")
    p.add_argument("--web-port", type=int)
    p.add_argument("--data-dir", type=Path)
    p.add_argument("--broker-port", type=int, default=9092, help="the broker's port (default 9092)")
    p.add_argument(
        "--broker",
        choices=["auto", "kafka", "tansu"],
        default="auto",
        help="kafka: Apache Kafka from its jars, durable (needs java and mvn); tansu: the embedded "
        "memory-only broker; auto (default): kafka where java and mvn are found, else tansu",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "demo", help="the data loop on the embedded broker with Spark local: ingest, transform, report"
    )
    p.add_argument("--data-dir", type=Path, default=Path("data/demo"))
    p.add_argument("--timeout", type=float, default=600)
    p.set_defaults(
        func=lambda a: sys.exit(importlib.import_module("scheduler.cli.demo").main(a.data_dir, a.timeout))
    )

    p = sub.add_parser(
        "report", help="run analytics on Spark: per schedule runs, success, latency, wasted runs"
    )
    common(p)
    p.add_argument("--url", default="http://127.0.0.1:6066", help="the scheduler's HTTP API")
    p.add_argument("--out", type=Path, default=Path("data/reports"))
    p.set_defaults(
        func=lambda a: importlib.import_module("scheduler.cli.analytics").main(
            a.url, _settings(a).bootstrap_servers, _settings(a).events_topic, a.out
        )
    )

    p = sub.add_parser("tail", help="print a topic's records as JSON lines (fired tasks by default)")
    common(p)
    p.add_argument("topic")
    p.add_argument(
        "--schema", default="FiredTask", help="Avro schema of the values (FiredTask, DeadLetter, ...)"
    )
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--max", type=int, default=0, help="stop after this many records")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="also log the Kafka client's INFO lines (stderr)"
    )
    # the records only: the Kafka client's INFO lines (connections, group joins) would interleave with them
    p.set_defaults(func=cmd_tail, quiet=True)

    _add_client_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    quiet = getattr(args, "quiet", False) and not getattr(args, "verbose", False)
    logs.basic_config(
        os.environ.get("SCHEDULER_LOG_FORMAT", "text"), logging.WARNING if quiet else logging.INFO
    )
    if quiet:  # (the Kafka client's own ERROR lines: a failure is said once, by the command)
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    # a server (worker, launcher, run, demo) logs its failures; every other command says one line (errors.py)
    func = args.func if args.command in SERVERS else guarded(args.func)
    code = func(args)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
