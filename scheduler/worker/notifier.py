"""The notifier: what happens to schedules, sent to the webhooks of their tenants' rules
(scheduler.domain.notifications).

Every worker runs one. Together they read the program-status topic (every accepted run transition) and the
alerts topic (SLA misses) in a consumer group of their own, so each record is read by one of them; a
record becomes an event (RUN_SUCCEEDED, RUN_FAILED, RETRIES_EXHAUSTED, DEADLINE_MISSED, NOT_FIRED), and
each rule that takes it a delivery. Deliveries go out one endpoint at a time per endpoint, in order, each
retried with backoff (1 s, 2 s, 4 s … 15 min) on a network error, a timeout, 408, 429 or 5xx, up to the
rule's maxAttempts; any other answer ends it. A dead endpoint holds up only its own queue (at most
MAX_QUEUED deliveries wait; past that one is DROPPED, recorded). Nothing waits on a delivery in the
worker's loops.

Every state of a delivery (PENDING, RETRYING, DELIVERED, FAILED, DROPPED) is a record of the deliveries
topic (keyed by delivery id: the latest wins; kept a week), which every worker follows for
`GET /notifications/{tenant}/{name}/deliveries` (the last MAX_SHOWN per rule). A record's offset is
committed once each of its deliveries has ended: after a crash, those not ended are sent again, with the
same `X-Scheduler-Delivery` id (at least once: a receiver deduplicates on it). A record older than
NOTIFY_MAX_AGE_MS when read (a new deployment reading the topics' history) is not sent."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Coroutine, MutableMapping
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import ConsumerStoppedError
from aiokafka.structs import OffsetAndMetadata

from scheduler.domain.notifications import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    Delivery,
    Event,
    EventKind,
    Rule,
    body_of,
    delay_ms,
    delivery_id,
    encode_delivery,
    signature,
)
from scheduler.kafka.config import BrokerProfile
from scheduler.kafka.consumers import FETCH_LOOP_WAKE_MS
from scheduler.kafka.group import PreviousMembers, member_of
from scheduler.wire.codec import decode
from scheduler.worker.failpoints import failpoint, make_deaf
from scheduler.worker.following import Following
from scheduler.worker.liveness import Work, fetched_to
from scheduler.worker.programs import TopicMap

if TYPE_CHECKING:
    import httpx

    from scheduler.kafka.config import Settings
    from scheduler.launcher.secrets import Secrets

log = logging.getLogger(__name__)

MAX_QUEUED = 1_000  # deliveries waiting for one endpoint
MAX_SHOWN = 100  # deliveries of a rule its GET shows
NOTIFY_MAX_AGE_MS = 3_600_000
CALL_TIMEOUT_S = 10.0
RETRIED_STATUSES = frozenset({408, 429})

Send = Callable[[str, bytes, bytes], Coroutine[Any, Any, None]]


class RuleRegistry(TopicMap[Rule]):
    """Notification rules, by `tenant/name`: the compacted `<app>-notification-rules` topic, held whole."""

    what = "notification rule"

    def parse(self, key: str, value: bytes) -> Rule:
        rule = Rule.from_json(json.loads(value))
        if rule.id != key:
            raise ValueError(f"rule {rule.id!r} under key {key!r}")
        return rule


class DeliveryLog(TopicMap[Delivery]):
    """The deliveries topic followed: the last MAX_SHOWN deliveries of each rule, newest last."""

    what = "delivery"

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        profile: BrokerProfile = "tansu",
        following: Following | None = None,
    ) -> None:
        super().__init__(bootstrap_servers, topic, profile=profile, following=following)
        self._of_rule: dict[str, OrderedDict[str, None]] = defaultdict(OrderedDict)

    def parse(self, key: str, value: bytes) -> Delivery:
        return Delivery.from_json(json.loads(value))

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        super().apply(key, value)
        if key is None or value is None:
            return
        name = key.decode(errors="replace")
        found = self._items.get(name)
        if found is None:
            return
        ids = self._of_rule[found.rule]
        ids[name] = None
        ids.move_to_end(name)
        while len(ids) > MAX_SHOWN:
            old, _ = ids.popitem(last=False)
            self._items.pop(old, None)

    def of_rule(self, rule: str) -> list[Delivery]:
        return [self._items[i] for i in self._of_rule.get(rule, {}) if i in self._items]


def events_of(topic: str, value: bytes, settings: Settings) -> list[Event]:
    """The events a record of the program-status or the alerts topic is (none for most transitions)."""
    if topic == settings.alerts_topic:
        alert = decode("Alert", value)
        schedule = alert["schedule"]
        return [Event(EventKind(alert["kind"]), schedule.partition("/")[0], schedule, int(alert["raisedAt"]),
                      alert.get("program"), None, alert.get("jobId"), None, alert.get("reason") or "",
                      f"alert|{schedule}|{alert['kind']}|{alert.get('jobId')}|{alert['dueBy']}")]  # fmt: skip
    note = decode("Notification", value)
    payload = note["payload"]
    status, run_id = payload.get("status"), payload.get("runId", "")
    if note["eventType"] != "program-status" or status not in ("COMPLETED", "FAILED") or "@" not in run_id:
        return []
    schedule = payload.get("schedule") or run_id.partition("@")[0]  # (a job's run id: tenant/name@…)
    attempt = int(payload["attempt"]) if str(payload.get("attempt", "")).isdigit() else 1
    common = dict(tenant=schedule.partition("/")[0], schedule=schedule, at=int(note["timestamp"]),
                  program=payload.get("programId"), run_id=run_id, job_id=payload.get("jobId"), attempt=attempt,
                  error=payload.get("error", ""))  # fmt: skip
    if status == "COMPLETED":
        return [Event(EventKind.RUN_SUCCEEDED, id=f"run|{run_id}|COMPLETED", **common)]  # type: ignore[arg-type]
    events = [Event(EventKind.RUN_FAILED, id=f"run|{run_id}|FAILED", **common)]  # type: ignore[arg-type]
    if payload.get("retried") != "true":
        events.append(Event(EventKind.RETRIES_EXHAUSTED, id=f"run|{run_id}|LAST", **common))  # type: ignore[arg-type]
    return events


class Notifier:
    def __init__(
        self,
        settings: Settings,
        rules: RuleRegistry,
        secrets: Secrets,
        send: Send,
        clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Coroutine[Any, Any, None]] = asyncio.sleep,
        counts: MutableMapping[str, int] | None = None,
    ) -> None:
        self.sleep = sleep
        self._writing: set[asyncio.Task[None]] = set()  # deliveries' records on their way
        self.settings = settings
        self.rules = rules
        self.secrets = secrets
        self.send = send
        self.clock = clock
        self._transport = transport
        self._http: httpx.AsyncClient | None = None  # (made at the first call: client)
        self._queues: dict[str, asyncio.Queue[tuple[Delivery, Rule, tuple[TopicPartition, int]]]] = {}
        self._senders: dict[str, asyncio.Task[None]] = {}
        self._unsettled: dict[TopicPartition, dict[int, int]] = defaultdict(dict)  # offset -> deliveries left
        self._read_to: dict[TopicPartition, int] = {}  # the next offset to read
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._stale: AIOKafkaConsumer | None = None  # (replaced by heal)
        self.read = 0  # records read (liveness: its progress)
        self.replaced = 0  # consumers replaced
        self.members = PreviousMembers(settings.data_dir)
        self.name = "notifier"
        # "notifications<OUTCOME>" -> deliveries ended so, "notificationRetries" (the worker's, for /metrics)
        self.counts: MutableMapping[str, int] = defaultdict(int) if counts is None else counts

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    def client(self) -> httpx.AsyncClient:
        """The webhooks' HTTP client, made at the first call: a worker without rules never imports httpx
        (with what it imports, ~110 modules and ~6 MB of a worker's memory)."""
        if self._http is None:
            import httpx

            self._http = httpx.AsyncClient(timeout=CALL_TIMEOUT_S, transport=self._transport)
        return self._http

    @property
    def client_errors(self) -> type[Exception]:
        """What a failed call raises (httpx's base error; imported by then: client)."""
        import httpx

        return httpx.HTTPError

    async def stop(self) -> None:
        for task in [*self._senders.values(), *([self._task] if self._task else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._senders.clear()
        self._task = None
        if self._writing:  # (the records of what was delivered: written before it stops)
            await asyncio.wait(set(self._writing), timeout=5)
        if self._http is not None:
            await self._http.aclose()

    async def _run(self) -> None:
        while not any(r.enabled for r in self.rules.all().values()):  # (no rule: no consumer group either)
            await asyncio.sleep(1)
        while True:
            consumer = AIOKafkaConsumer(
                self.settings.program_status_topic,
                self.settings.alerts_topic,
                bootstrap_servers=self.settings.bootstrap_servers,
                group_id=self.settings.notifier_group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level="read_committed" if self.settings.transactional else "read_uncommitted",
                metadata_max_age_ms=5000,
                consumer_timeout_ms=FETCH_LOOP_WAKE_MS,
            )
            try:
                await consumer.start()
                deaf = failpoint("notifier-deaf")
                if deaf == "always" or (deaf == "once" and self.replaced == 0):
                    make_deaf(consumer)
                self._consumer = consumer
                while self._stale is not consumer:
                    batch = await consumer.getmany(timeout_ms=500, max_records=500)
                    self.members.remember(member_of(consumer))  # (see kafka/group.py)
                    for tp, records in batch.items():
                        for msg in records:
                            self._read(tp, msg.offset, msg.topic, msg.value, msg.timestamp)
                    await self._commit(consumer)
            except asyncio.CancelledError:
                raise
            except ConsumerStoppedError:
                pass  # (replaced by heal)
            except Exception:
                log.exception("notifier consumer failed; starting it again")
                await asyncio.sleep(1)
            finally:
                self._consumer = None
                with contextlib.suppress(Exception):
                    await consumer.stop()
                self._unsettled.clear()
                self._read_to.clear()
            self.replaced += 1

    async def work(self) -> Work:
        """Run states and alerts behind the end of the partitions held (liveness.py: a notifier whose
        consumer stopped fetching is found stalled, and its consumer replaced)."""
        consumer = self._consumer
        what = "run states and alerts behind the end of their topics"
        if consumer is None:
            return Work(0, self.read, what)
        tps = sorted(consumer.assignment())
        ends = await consumer.end_offsets(tps) if tps else {}
        behind = sum(
            max(0, end - at) for tp, end in ends.items() if (at := fetched_to(consumer, tp)) is not None
        )
        return Work(behind, self.read, what)

    async def heal(self) -> bool:
        consumer = self._consumer
        if consumer is None:
            return False
        self._stale = consumer
        with contextlib.suppress(Exception):
            await consumer.stop()
        return True

    def _read(self, tp: TopicPartition, offset: int, topic: str, value: bytes | None, timestamp: int) -> None:
        self._read_to[tp] = offset + 1
        self.read += 1
        if value is None or self.clock() - timestamp > NOTIFY_MAX_AGE_MS:
            return
        try:
            events = events_of(topic, value, self.settings)
        except Exception as exc:  # (not ours to judge: the topic's producers are the workers)
            log.warning("notifier: record %s@%d of %s not read: %s", tp.partition, offset, topic, exc)
            return
        rules = [r for r in self.rules.all().values() if r.enabled]
        for event in events:
            for rule in rules:
                if rule.takes(event):
                    self._enqueue(rule, event, (tp, offset))

    def _enqueue(self, rule: Rule, event: Event, source: tuple[TopicPartition, int]) -> None:
        url = rule.webhook["url"]
        delivery = Delivery(delivery_id(rule, event), rule.id, event.to_json(), url, at=self.clock())
        queue = self._queues.get(url)
        if queue is None:
            queue = self._queues[url] = asyncio.Queue(MAX_QUEUED)
            self._senders[url] = asyncio.create_task(self._sender(url, queue))
        if queue.full():
            delivery.outcome, delivery.error = "DROPPED", f"{MAX_QUEUED} deliveries already wait for {url}"
            self.counts["notificationsDROPPED"] += 1
            self._record(delivery)
            return
        tp, offset = source
        self._unsettled[tp][offset] = self._unsettled[tp].get(offset, 0) + 1
        queue.put_nowait((delivery, rule, source))
        self._record(delivery)

    async def _sender(
        self, url: str, queue: asyncio.Queue[tuple[Delivery, Rule, tuple[TopicPartition, int]]]
    ) -> None:
        while True:
            delivery, rule, (tp, offset) = await queue.get()
            try:
                await self._deliver(delivery, rule)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # (a bug must not stop the endpoint's queue)
                log.exception("notifier: delivery %s failed", delivery.id)
                delivery.outcome, delivery.error = "FAILED", f"{type(exc).__name__}: {exc}"
                self._record(delivery)
            finally:
                left = self._unsettled[tp].get(offset, 1) - 1
                if left <= 0:
                    self._unsettled[tp].pop(offset, None)
                else:
                    self._unsettled[tp][offset] = left

    async def _deliver(self, delivery: Delivery, rule: Rule) -> None:
        event = Event(EventKind(delivery.event["kind"]), delivery.event["tenant"], delivery.event["schedule"],
                      delivery.event["at"], delivery.event.get("program"), delivery.event.get("runId"),
                      delivery.event.get("jobId"), delivery.event.get("attempt"), delivery.event.get("error", ""),
                      delivery.event.get("id", ""))  # fmt: skip
        body = json.dumps(body_of(rule, event, delivery.id), separators=(",", ":")).encode()
        headers = {**rule.webhook.get("headers", {}), "Content-Type": "application/json",
                   DELIVERY_HEADER: delivery.id, "User-Agent": "scheduler-notifier"}  # fmt: skip
        while True:
            delivery.attempts += 1
            started = time.monotonic()
            status, error = None, ""
            try:
                ref = rule.webhook.get("secretRef")
                if ref:
                    key = self.secrets.value(ref)
                    headers[SIGNATURE_HEADER] = signature(key, body, self.clock() // 1000)
                answer = await self.client().post(rule.webhook["url"], content=body, headers=headers)
                status = answer.status_code
                if status >= 300:
                    error = answer.text[:500]
            except self.client_errors as exc:
                error = f"{type(exc).__name__}: {exc}"[:500] or type(exc).__name__
            except LookupError as exc:  # (the signing secret: in none of the stores)
                error = str(exc)
            delivery.status, delivery.error, delivery.at = status, error, self.clock()
            delivery.calls = [*delivery.calls[-9:], {"at": delivery.at, "status": status, "error": error[:200],
                                                     "ms": int((time.monotonic() - started) * 1000)}]  # fmt: skip
            if status is not None and 200 <= status < 300:
                delivery.outcome, delivery.next_at = "DELIVERED", None
            elif (status is None or status >= 500 or status in RETRIED_STATUSES) and (
                delivery.attempts < rule.max_attempts
            ):
                wait = delay_ms(delivery.attempts + 1)
                delivery.outcome, delivery.next_at = "RETRYING", delivery.at + wait
                self._record(delivery)
                self.counts["notificationRetries"] += 1
                await self.sleep(wait / 1000)
                continue
            else:
                delivery.outcome, delivery.next_at = "FAILED", None
            self.counts[f"notifications{delivery.outcome}"] += 1
            self._record(delivery)
            if delivery.outcome == "FAILED":
                log.warning("notifier: %s to %s FAILED after %d calls: %s", delivery.rule, delivery.url,
                            delivery.attempts, delivery.error or delivery.status)  # fmt: skip
            return

    def _record(self, delivery: Delivery) -> None:
        value = encode_delivery(delivery)
        task = asyncio.create_task(self.send(self.settings.deliveries_topic, delivery.id.encode(), value))
        self._writing.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._writing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("notifier: a delivery's record was not written: %s", task.exception())

    async def _commit(self, consumer: AIOKafkaConsumer) -> None:
        """Each partition up to its first record with a delivery not ended (else all that was read)."""
        offsets = {}
        owned = consumer.assignment()
        for tp in [tp for tp in self._read_to if tp not in owned]:  # (moved to another worker: it reads them)
            del self._read_to[tp]
        for tp, end in self._read_to.items():
            pending = self._unsettled.get(tp)
            offsets[tp] = OffsetAndMetadata(min(pending) if pending else end, "")
        if offsets:
            with contextlib.suppress(Exception):
                await consumer.commit(offsets)


class Notifications:
    """The worker's notification service: the rules and the deliveries it follows, and its notifier."""

    def __init__(
        self,
        settings: Settings,
        send: Send,
        counts: MutableMapping[str, int] | None = None,
        following: Following | None = None,
    ) -> None:
        """`following`: the worker's consumer of the topics it follows whole (following.py)."""
        from scheduler.launcher.secrets import Secrets

        follows = settings.broker_profile
        self.rules = RuleRegistry(
            settings.bootstrap_servers,
            settings.notification_rules_topic,
            profile=follows,
            following=following,
        )
        self.deliveries = DeliveryLog(
            settings.bootstrap_servers, settings.deliveries_topic, profile=follows, following=following
        )
        self.notifier = Notifier(settings, self.rules, Secrets.from_settings(settings), send, counts=counts)

    async def start(self) -> None:
        """The rules followed; the notifier reads and sends once there is one (the deliveries are followed
        once asked for)."""
        await self.rules.start()
        await self.notifier.start()

    async def stop(self) -> None:
        await self.notifier.stop()
        await self.deliveries.stop()
        await self.rules.stop()
