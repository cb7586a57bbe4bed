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

from scheduler.cli import (
    apply,
    backfills,
    calendars,
    jobs,
    messages,
    notifications,
    programs,
    schedules,
    sensors,
)
from scheduler.cli.errors import guarded
from scheduler.cli.render import print_answer
from scheduler.domain.basics import plural
from scheduler.kafka.config import Settings
from scheduler.worker import logs

if TYPE_CHECKING:
    from scheduler.client.http import HttpClient


def _settings(args: argparse.Namespace, **extra: Any) -> Settings:
    """The settings from SCHEDULER_* and the command line; a value out of range is a usage error (exit 2)
    naming the setting, not a traceback."""
    from pydantic import ValidationError

    from scheduler.kafka.config import ENV_VARS

    try:
        return Settings.from_env(
            app_id=getattr(args, "app_id", None),
            bootstrap_servers=getattr(args, "bootstrap", None),
            web_port=getattr(args, "web_port", None),
            data_dir=getattr(args, "data_dir", None),
            **extra,
        )
    except ValidationError as exc:
        names = {field: env for env, field in ENV_VARS.items()}
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "settings"
            flag = f"--{field.replace('_', '-')}" if getattr(args, field, None) is not None else None
            where = " or ".join(w for w in (flag, names.get(field)) if w) or field
            print(f"scheduler: {where}: {error['msg']} (got {error.get('input')!r})", file=sys.stderr)
        raise SystemExit(2) from None


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
    from scheduler.kafka.group import leave_previous_members
    from scheduler.worker.collector import tune_collector
    from scheduler.worker.liveness import LEFT_EXIT_CODE

    def say(text: str) -> None:
        print(f"scheduler: {text}", file=sys.stderr, flush=True)

    if not wait_for_any(settings.bootstrap_servers, settings.startup_wait_s, say):
        say(f"no broker answered at {settings.bootstrap_servers} within {settings.startup_wait_s:.0f} s")
        raise SystemExit(LEFT_EXIT_CODE)  # (a supervisor starts it again: the broker may be back by then)
    # a crashed process's members would hold its partitions until their sessions end (kafka/group.py)
    leave_previous_members(settings.bootstrap_servers, settings.data_dir, settings.worker_groups(), say=say)
    tune_collector()
    try:
        faust_runner(worker.faust_app, settings).execute_from_commandline()
    except SystemExit as exiting:
        if worker.liveness.left is not None:  # (a loop stayed stalled: start me again)
            print(f"scheduler: the worker left: {worker.liveness.left}", file=sys.stderr)
            raise SystemExit(LEFT_EXIT_CODE) from None
        if exiting.code not in (0, None) and _lost_the_broker(exiting.__context__):
            # (the network went between the broker check above and a client's bootstrap: start me again)
            say(f"lost the brokers at {settings.bootstrap_servers} while starting: {exiting.__context__}")
            raise SystemExit(LEFT_EXIT_CODE) from None
        raise


def _lost_the_broker(exc: BaseException | None) -> bool:
    """Whether a worker's start failed for want of a broker (a Kafka client that could not bootstrap)."""
    from aiokafka.errors import KafkaConnectionError

    return isinstance(exc, KafkaConnectionError)


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
    from scheduler.http import log_server
    from scheduler.kafka.group import leave_previous_members
    from scheduler.launcher.launcher import Launcher
    from scheduler.launcher.run_logs import RunLogs
    from scheduler.worker.liveness import Liveness

    async def main() -> None:
        settings = _settings(args)
        groups = [settings.launcher_group]  # (its crashed predecessor's member: see kafka/group.py)
        await asyncio.to_thread(leave_previous_members, settings.bootstrap_servers, settings.data_dir, groups)
        # its runs' output is read from its own log server (GET .../runs/{id}/logs on a worker asks it)
        server, logs_url = await log_server.serve(settings, RunLogs.from_settings(settings))
        logging.getLogger(__name__).info("launcher's run logs served at %s", logs_url)
        launcher = Launcher(settings, logs_url=logs_url)
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
            await server.cleanup()
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


#: what `scheduler runs stop|suspend|resume` prints once the request is accepted
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
    print_answer(
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

    for module in (
        schedules,
        backfills,
        jobs,
        calendars,
        notifications,
        messages,
        programs,
        sensors,
        apply,
    ):  # (each its groups)
        module.register(sub, leaf)

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
