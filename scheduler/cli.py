"""Command line: `scheduler worker`, `scheduler run` (embedded broker + worker), `scheduler tail TOPIC`."""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from scheduler import logs
from scheduler.config import Settings


def _settings(args: argparse.Namespace, **extra: Any) -> Settings:
    return Settings.from_env(
        app_id=getattr(args, "app_id", None),
        bootstrap_servers=getattr(args, "bootstrap", None),
        web_port=getattr(args, "web_port", None),
        data_dir=getattr(args, "data_dir", None),
        **extra,
    )


def run_worker(settings: Settings) -> None:
    import faust

    from scheduler.app import Worker

    worker = Worker(settings)
    options = logs.worker_options(settings.log_format, settings.log_level)
    faust.Worker(worker.faust_app, **options).execute_from_commandline()


def cmd_worker(args: argparse.Namespace) -> None:
    run_worker(_settings(args))


def cmd_launcher(args: argparse.Namespace) -> None:
    """The launcher as its own process: runs the programs of launch requests, reports their states."""
    from scheduler.launcher import Launcher

    async def main() -> None:
        launcher = Launcher(_settings(args))
        try:
            await launcher.run()
        finally:
            await launcher.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


async def _prepare_embedded(settings: Settings, replay: list[tuple[bytes, bytes]]) -> None:
    from scheduler.app import partition_for
    from scheduler.producer import BatchedProducer, TopicCreator

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
    """Embedded broker + one worker + HTTP, with schedules kept across restarts by the journal."""
    from scheduler.broker import EmbeddedBroker
    from scheduler.journal import compact_journal

    # `scheduler run` is the local development command: auth is off unless tokens are configured.
    configured = any(
        os.environ.get(v) for v in ("SCHEDULER_AUTH", "SCHEDULER_AUTH_TOKENS", "SCHEDULER_AUTH_TOKENS_FILE")
    )
    settings = _settings(
        args,
        broker_profile="tansu",
        launcher="off" if args.no_launcher else "embedded",
        auth=None if configured else "off",
    )
    if settings.auth == "off":
        print("scheduler: HTTP auth is OFF (local development; set SCHEDULER_AUTH_TOKENS_FILE to turn it on)")
    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    journal = settings.journal_path or data_dir / "journal.bin"
    broker = EmbeddedBroker(port=args.broker_port, log_path=data_dir / "broker.log").start()
    try:
        settings = settings.model_copy(
            update={"bootstrap_servers": broker.bootstrap_servers, "journal_path": journal}
        )
        # The fresh in-memory broker has no changelogs: local table state from an earlier run is stale.
        shutil.rmtree(data_dir / settings.app_id, ignore_errors=True)
        replay = compact_journal(journal)
        asyncio.run(_prepare_embedded(settings, replay))
        print(
            f"scheduler: broker {broker.bootstrap_servers}, HTTP {settings.web_url}, "
            f"commands topic {settings.commands_topic}, {len(replay)} schedules restored from {journal}",
            flush=True,
        )
        run_worker(settings)
    finally:
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
    from aiokafka import AIOKafkaConsumer

    from scheduler.codec import DecodeError, decode

    settings = _settings(args)
    consumer = AIOKafkaConsumer(
        args.topic,
        bootstrap_servers=settings.bootstrap_servers,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        enable_auto_commit=False,
    )
    await consumer.start()
    shown = 0
    try:
        async for msg in consumer:
            try:
                record: Any = decode(args.schema, msg.value)
            except DecodeError as exc:
                record = {"undecodable": str(exc), "value": msg.value}
            print(json.dumps(_jsonable(record), ensure_ascii=False), flush=True)
            shown += 1
            if args.max and shown >= args.max:
                break
    finally:
        await consumer.stop()


def cmd_tail(args: argparse.Namespace) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_tail(args))


def main(argv: list[str] | None = None) -> None:
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

    p = sub.add_parser("run", help="embedded broker + one worker (with its launcher) + HTTP, for one machine")
    p.add_argument("--no-launcher", action="store_true", help="do not run programs in this process")
    p.add_argument("--app-id")
    p.add_argument("--web-port", type=int)
    p.add_argument("--data-dir", type=Path)
    p.add_argument("--broker-port", type=int, default=9092, help="embedded broker port (default 9092)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "demo", help="the data loop on the embedded broker with Spark local: ingest, transform, report"
    )
    p.add_argument("--data-dir", type=Path, default=Path("data/demo"))
    p.add_argument("--timeout", type=float, default=600)
    p.set_defaults(func=lambda a: sys.exit(__import__("scheduler.demo").demo.main(a.data_dir, a.timeout)))

    p = sub.add_parser(
        "report", help="run analytics on Spark: per schedule runs, success, latency, wasted runs"
    )
    common(p)
    p.add_argument("--url", default="http://127.0.0.1:6066", help="the scheduler's HTTP API")
    p.add_argument("--out", type=Path, default=Path("data/reports"))
    p.set_defaults(
        func=lambda a: __import__("scheduler.analytics").analytics.main(
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
    p.set_defaults(func=cmd_tail)

    args = parser.parse_args(argv)
    logs.basic_config(os.environ.get("SCHEDULER_LOG_FORMAT", "text"))
    args.func(args)


if __name__ == "__main__":
    main()
