"""Worker configuration from the environment, and the broker profile (Faust settings a broker needs).

Every setting is an environment variable; `Settings.from_env()` reads them all, so deploy/ and the
tests configure workers the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from scheduler.domain.caps import InvalidCaps, RunCaps
from scheduler.domain.runs import MAX_RUN_AGE_MS, MAX_RUNS_KEPT

BrokerProfile = Literal["kafka", "tansu"]
log = logging.getLogger(__name__)

#: environment variable -> Settings field; the one list deploy/ and the docs refer to
ENV_VARS = {
    "SCHEDULER_APP_ID": "app_id",
    "KAFKA_BOOTSTRAP_SERVERS": "bootstrap_servers",
    "SCHEDULER_BROKER_PROFILE": "broker_profile",
    "SCHEDULER_PARTITIONS": "partitions",
    "SCHEDULER_REPLICATION_FACTOR": "replication_factor",
    "SCHEDULER_STANDBY_REPLICAS": "standby_replicas",
    "SCHEDULER_DATA_DIR": "data_dir",
    "SCHEDULER_WEB_HOST": "web_host",
    "SCHEDULER_WEB_PORT": "web_port",
    "SCHEDULER_WEB_BIND": "web_bind",
    "SCHEDULER_COMMANDS_TOPIC": "commands_topic",
    "SCHEDULER_LIGHT_TOPIC": "light_topic",
    "SCHEDULER_DEAD_LETTER_TOPIC": "dead_letter_topic",
    "SCHEDULER_ALERTS_TOPIC": "alerts_topic",
    "SCHEDULER_EVENTS_TOPIC": "events_topic",
    "SCHEDULER_DELAYED_TOPIC": "delayed_topic",
    "SCHEDULER_LAUNCH_TOPIC": "launch_topic",
    "SCHEDULER_PROGRAMS_FILE": "programs_file",
    "SCHEDULER_LAUNCHER": "launcher",
    "SCHEDULER_SPARK_MASTER": "spark_master",
    "SCHEDULER_SECRETS": "secrets",
    "SCHEDULER_SECRETS_DIR": "secrets_dir",
    "SCHEDULER_DATASETS_DIR": "datasets_dir",
    "SCHEDULER_JOURNAL": "journal_path",
    "SCHEDULER_LOG_LEVEL": "log_level",
    "SCHEDULER_PROGRESS_INTERVAL_MS": "progress_interval_ms",
    "SCHEDULER_ROCKSDB_CACHE_MB": "rocksdb_cache_mb",
    "SCHEDULER_BULK_RESTORE_MIN_RECORDS": "bulk_restore_min_records",
    "SCHEDULER_SESSION_TIMEOUT_S": "session_timeout_s",
    "SCHEDULER_AUTH": "auth",
    "SCHEDULER_AUTH_TOKENS_FILE": "auth_tokens_file",
    "SCHEDULER_AUTH_TOKENS": "auth_tokens",
    "SCHEDULER_LOG_FORMAT": "log_format",
    "SCHEDULER_MAX_SCHEDULES_PER_TENANT": "max_schedules_per_tenant",
    "SCHEDULER_MAX_ACTIVE_RUNS": "max_active_runs",
    "SCHEDULER_TENANT_MAX_ACTIVE_RUNS": "tenant_max_active_runs",
    "SCHEDULER_TRANSACTIONS": "transactions",
    "SCHEDULER_COMMIT_INTERVAL_MS": "commit_interval_ms",
    "SCHEDULER_REQUEST_TIMEOUT_MS": "request_timeout_ms",
    "SCHEDULER_STALL_AFTER_S": "stall_after_s",
    "SCHEDULER_LEAVE_AFTER_S": "leave_after_s",
    "SCHEDULER_STARTUP_WAIT_S": "startup_wait_s",
    "SCHEDULER_LAUNCHER_ID": "launcher_id",
    "SCHEDULER_RUN_LEASE_MS": "run_lease_ms",
    "SCHEDULER_RUN_PENDING_TIMEOUT_MS": "run_pending_timeout_ms",
    "SCHEDULER_LAUNCHER_DRAIN_S": "launcher_drain_s",
    "SCHEDULER_LAUNCHER_LOGS_PORT": "launcher_logs_port",
    "SCHEDULER_RUN_LOG_BYTES": "run_log_bytes",
    "SCHEDULER_RUN_LOGS_MAX_BYTES": "run_logs_max_bytes",
    "SCHEDULER_SENSOR_CONCURRENCY": "sensor_concurrency",
    "SCHEDULER_FINISHED_RETENTION_MS": "finished_retention_ms",
    "SCHEDULER_RUN_HISTORY_MAX": "run_history_max",
    "SCHEDULER_RUN_HISTORY_MAX_AGE_MS": "run_history_max_age_ms",
    "SCHEDULER_EVENT_REPLAY_MS": "event_replay_ms",
    "SCHEDULER_EVENT_REPLAY_MAX": "event_replay_max",
}


class Settings(BaseModel):
    app_id: str = "scheduler"
    bootstrap_servers: str = "127.0.0.1:9092"
    broker_profile: BrokerProfile = "kafka"
    partitions: int = Field(8, ge=1, le=1024)
    replication_factor: int = Field(1, ge=1)
    standby_replicas: int = Field(0, ge=0)
    data_dir: Path = Path("data")
    web_host: str = "127.0.0.1"
    web_port: int = Field(6066, ge=1, le=65535)
    web_bind: str = ""  # interface to listen on; default: web_host
    commands_topic: str = ""
    light_topic: str = "light-scheduler"
    dead_letter_topic: str = ""
    alerts_topic: str = ""  # SLA misses (Avro Alert); default <app>-alerts
    events_topic: str = ""
    delayed_topic: str = ""  # records to deliver later (worker/delayed.py); default <app>-delayed
    launch_topic: str = ""
    programs_file: Path | None = None
    launcher: Literal["off", "embedded"] = "off"  # embedded: the worker also runs the launcher
    spark_master: str = "local[*]"
    # where the launcher finds the secrets programs reference ({"secretRef": "tenant/name"}): "files" (under
    # secrets_dir: <dir>/<tenant>/<name>), "env" (SCHEDULER_SECRET_<TENANT>__<NAME>), both in the order
    # given, or "module:factory" (a callable of the settings answering a store: launcher/secrets.py)
    secrets: str = Field("files,env", max_length=512)
    secrets_dir: Path | None = None
    # runs' output, kept by the launcher that ran them under <data_dir>/run-logs (launcher/run_logs.py): per
    # run its first quarter and its latest three quarters; in all, the runs that ended longest ago go first
    run_log_bytes: int = Field(1 << 20, ge=4096, le=1 << 34)
    run_logs_max_bytes: int = Field(1 << 30, ge=1 << 16, le=1 << 44)
    # a finished schedule (a one-shot fired, notAfter passed) is deleted this long after it finished (0: kept)
    finished_retention_ms: int = Field(7 * 86_400_000, ge=0, le=3650 * 86_400_000)
    # polling sensors a worker evaluates at once (each in a process of its own: worker/sensors.py)
    sensor_concurrency: int = Field(4, ge=1, le=256)
    # a standalone launcher's log server (what GET .../runs/{id}/logs reads from): 0 is any free port
    launcher_logs_port: int = Field(0, ge=0, le=65535)
    datasets_dir: Path | None = None
    journal_path: Path | None = None
    log_level: str = "info"
    progress_interval_ms: int = Field(1000, ge=10)
    # RocksDB's block cache per table partition (Faust's default is 2 GiB each: at millions of schedules the
    # cache, not the schedules, would take the memory)
    rocksdb_cache_mb: int = Field(32, ge=1, le=4096)
    # changelog partitions of the schedules and delayed messages together at least this far behind are
    # restored in bulk (kafka.bulk_restore)
    bulk_restore_min_records: int = Field(20_000, ge=1)
    session_timeout_s: float | None = Field(None, ge=3, le=300)  # default: the broker profile's
    # HTTP auth: "on" (the default) needs tokens (a file, or JSON in SCHEDULER_AUTH_TOKENS); "off" is for
    # local development only and must be asked for explicitly. See scheduler/http/auth.py.
    auth: Literal["on", "off"] = "on"
    auth_tokens_file: Path | None = None
    auth_tokens: str = ""
    log_format: Literal["text", "json"] = "text"
    max_schedules_per_tenant: int = Field(100_000, ge=1)
    # run caps (scheduler.domain.caps): runs active at once in the deployment (0: no cap), and per tenant
    # ("20": each tenant's; "acme=200,*=20": acme's, and every other's; "": none)
    max_active_runs: int = Field(0, ge=0, le=10_000_000)
    tenant_max_active_runs: str = Field("", max_length=10_000)
    # Kafka transactions per partition (exactly-once fires and schedule writes, zombies fenced): "auto" is
    # on with the kafka profile and off with tansu, which has no transactions
    transactions: Literal["auto", "on", "off"] = "auto"
    # the least time between two commits of a partition's transaction (0: as soon as the last one ended)
    commit_interval_ms: int = Field(0, ge=0, le=60_000)
    # an HTTP write's deadline when its request names none: a command applied later is refused
    request_timeout_ms: int = Field(30_000, ge=100, le=3_600_000)
    # a loop (the commands ingest, the punctuator) with work waiting and none done for this long is
    # stalled: the worker is not ready, and the loop's Kafka client is replaced (worker/liveness.py)
    stall_after_s: float = Field(30.0, ge=1, le=3_600)
    # a loop still stalled this long after it was found stalled (its client replaced meanwhile): the worker
    # stops (exit code 75) so its partitions move to a worker that can serve them; 0: never
    leave_after_s: float = Field(90.0, ge=0, le=86_400)
    # a worker started while no bootstrap server accepts a connection (a network cut, a broker restarting)
    # waits this long for one, then stops (exit code 75, start it again); 0: one try
    startup_wait_s: float = Field(60.0, ge=0, le=86_400)
    # the launcher's name in its claims and heartbeats (default: host and process id)
    launcher_id: str = Field("", max_length=128)
    # a launcher renews the runs it holds every third of this; a run not renewed for this long is FAILED
    run_lease_ms: int = Field(30_000, ge=1_000, le=3_600_000)
    # a launched run that no launcher took (PREPARING) within this is FAILED
    run_pending_timeout_ms: int = Field(600_000, ge=1_000, le=7 * 86_400_000)
    # a stopping launcher waits this long for its runs to end before it leaves them to their leases
    launcher_drain_s: float = Field(300.0, ge=0, le=86_400)
    # ended run records kept per program: the newest this many, that ended within this age
    run_history_max: int = Field(MAX_RUNS_KEPT, ge=0, le=100_000)
    run_history_max_age_ms: int = Field(MAX_RUN_AGE_MS, ge=0)
    # the events of each event key recorded in the last this long (at most this many) are kept, so a
    # schedule whose trigger index entry comes after an event it watches still gets it
    event_replay_ms: int = Field(300_000, ge=0, le=86_400_000)
    event_replay_max: int = Field(100, ge=0, le=10_000)

    def model_post_init(self, _context: Any) -> None:
        if not self.commands_topic:
            self.commands_topic = f"{self.app_id}-commands"
        if not self.web_bind:
            self.web_bind = self.web_host
        if not self.launch_topic:
            self.launch_topic = f"{self.app_id}-launches"
        if self.datasets_dir is None:
            self.datasets_dir = self.data_dir / "datasets"
        if not self.events_topic:
            self.events_topic = f"{self.app_id}-events"
        if not self.delayed_topic:
            self.delayed_topic = f"{self.app_id}-delayed"
        if not self.dead_letter_topic:
            self.dead_letter_topic = f"{self.app_id}-dead-letters"
        if not self.alerts_topic:
            self.alerts_topic = f"{self.app_id}-alerts"

    @property
    def transactional(self) -> bool:
        """Whether the worker produces in transactions (see scheduler.kafka.transactions)."""
        if self.transactions == "auto":
            return self.broker_profile == "kafka"
        if self.transactions == "on" and self.broker_profile == "tansu":
            raise ValueError("SCHEDULER_TRANSACTIONS=on needs Apache Kafka: the tansu profile has none")
        return self.transactions == "on"

    @property
    def launcher_name(self) -> str:
        """This process's launcher in claims and heartbeats: SCHEDULER_LAUNCHER_ID, else host and pid."""
        return self.launcher_id or f"{socket.gethostname()}-{os.getpid()}"

    @property
    def index_topic(self) -> str:
        return f"{self.app_id}-trigger-index"

    @property
    def trigger_topic(self) -> str:
        return f"{self.app_id}-trigger-fired"

    @property
    def jobs_topic(self) -> str:
        return f"{self.app_id}-jobs"

    @property
    def programs_topic(self) -> str:
        return f"{self.app_id}-programs"

    @property
    def calendars_topic(self) -> str:
        """Exclusion calendars, keyed `tenant/name` (JSON; the latest wins, null deletes)."""
        return f"{self.app_id}-calendars"

    @property
    def launcher_control_topic(self) -> str:
        return f"{self.app_id}-launcher-control"

    @property
    def notification_rules_topic(self) -> str:
        """Notification rules, keyed `tenant/name` (JSON; the latest wins, null deletes)."""
        return f"{self.app_id}-notification-rules"

    @property
    def sensors_topic(self) -> str:
        """Each polling sensor's state (cursor, last evaluation), keyed by its program id (JSON; the latest
        wins): worker/sensors.py."""
        return f"{self.app_id}-sensors"

    @property
    def deliveries_topic(self) -> str:
        """Each state of each notification delivery, keyed by delivery id (JSON; kept a week)."""
        return f"{self.app_id}-deliveries"

    @property
    def program_status_topic(self) -> str:
        """Every accepted run transition, once, keyed by the program's event key (the judged output of
        the program-status events of the events topic)."""
        return f"{self.app_id}-program-status"

    def own_topics(self) -> dict[str, dict[str, str]]:
        """The topics workers and launchers create at start (Faust creates its agents' and tables'), each
        with the topic configs it needs. A cluster that does not create topics on first use needs them."""
        return {
            self.commands_topic: {},
            self.dead_letter_topic: {},
            self.alerts_topic: {},
            self.events_topic: {},
            self.delayed_topic: {},
            # the hops between agents (Faust's agents create them too; with transactions there are none)
            self.index_topic: {},
            self.trigger_topic: {},
            self.jobs_topic: {},
            self.launch_topic: {},
            self.program_status_topic: {},
            # stop, suspend and resume requests, by run id: a launcher reads the last day's when it starts
            self.launcher_control_topic: {"cleanup.policy": "compact,delete", "retention.ms": "86400000"},
            # program definitions: the latest per program id wins, so older ones may go
            self.programs_topic: {"cleanup.policy": "compact"},
            self.calendars_topic: {"cleanup.policy": "compact"},
            self.notification_rules_topic: {"cleanup.policy": "compact"},
            self.sensors_topic: {"cleanup.policy": "compact"},
            self.deliveries_topic: {"cleanup.policy": "compact,delete", "retention.ms": str(7 * 86_400_000)},
        }

    @property
    def web_url(self) -> str:
        return f"http://{self.web_host}:{self.web_port}"

    @property
    def notifier_group(self) -> str:
        return f"{self.app_id}-notifier"

    @property
    def launcher_group(self) -> str:
        return f"{self.app_id}-launcher"

    def worker_groups(self) -> list[str]:
        """The consumer groups a worker joins: its app's (Faust's), its notifier's, an embedded launcher's."""
        embedded = [self.launcher_group] if self.launcher == "embedded" else []
        return [self.app_id, self.notifier_group, *embedded]

    @field_validator("tenant_max_active_runs")
    @classmethod
    def _caps_parse(cls, value: str) -> str:
        try:
            RunCaps.parse(0, value)
        except InvalidCaps as exc:
            raise ValueError(f"SCHEDULER_TENANT_MAX_ACTIVE_RUNS: {exc}") from None
        return value

    @property
    def run_caps(self) -> RunCaps:
        return RunCaps.parse(self.max_active_runs, self.tenant_max_active_runs)

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        values: dict[str, Any] = {}
        for env, name in ENV_VARS.items():
            raw = os.environ.get(env)
            if raw not in (None, ""):
                values[name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def env(self) -> dict[str, str]:
        """These settings as environment variables (to start a worker process with them)."""
        out = {}
        for env, name in ENV_VARS.items():
            value = getattr(self, name)
            if value is not None:
                out[env] = str(value)
        return out


#: how long topic creation at start may look for a broker that answers (Faust's own timeout: 30 s)
CONTROLLER_LOOKUP_TIMEOUT_S = 60.0


async def _answering_controller(self: Any, owner: Any, client: Any, timeout: int = 30000) -> Any:
    """Faust's Transport._get_controller_node asks the first broker in the metadata only, and a worker
    that starts while that broker restarts dies with NodeNotReadyError (seen on Kafka during a rolling
    restart). Ask each broker in turn, and retry until one answers."""
    from aiokafka.errors import KafkaError, NodeNotReadyError
    from aiokafka.protocol.metadata import MetadataRequest

    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout / 1000, CONTROLLER_LOOKUP_TIMEOUT_S)
    while True:
        for node_id in [b.nodeId for b in client.cluster.brokers()]:
            try:
                result = await owner.wait(client.send(node_id, MetadataRequest([])), timeout=timeout)
            except (KafkaError, TimeoutError):  # not connected (yet), restarting, or gone
                continue
            if result.stopped:
                return None
            return result.result.controller_id
        if loop.time() > deadline:
            raise NodeNotReadyError("no broker answered a metadata request to find the controller")
        await asyncio.sleep(0.5)
        with contextlib.suppress(Exception):
            await client.force_metadata_update()


#: how long a topic's creation is retried while the controller it was sent to is away
CREATE_RETRY_S = 60.0


async def create_retrying(
    create: Any, client: Any, topic: str, retry_s: float = CREATE_RETRY_S, pause_s: float = 1.0
) -> None:
    """`create()` again while it fails as a controller that is away does (a node not ready, a connection
    closed, a request timed out, "not the controller", fewer brokers than replicas), for up to `retry_s`: a worker started while the
    controller was SIGKILLed sent the creation of Faust's leader topic to it and died at start (the fault
    campaign, seed 4000). Any other error, and the last one, is raised."""
    from aiokafka.errors import InvalidReplicationFactorError, KafkaError

    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_s
    while True:
        try:
            await create()
            return
        except (KafkaError, TimeoutError, RuntimeError) as exc:
            away = (
                getattr(exc, "retriable", False)
                or isinstance(exc, (TimeoutError, InvalidReplicationFactorError))  # (a broker of 3 away)
                or "controller" in str(exc)
            )
            if not away or loop.time() + pause_s > deadline:
                raise
            log.warning("creating topic %s: %r; retrying in %.0f s", topic, exc, pause_s)
        await asyncio.sleep(pause_s)
        with contextlib.suppress(Exception):
            await client.force_metadata_update()


def apply_transport_fixes() -> None:
    """Process-wide, on every broker: Faust's fetch returns only the partitions it asked for, and fetches
    no changelog partition it paused (see kafka.recovery), its transport rides out a broker that is
    restarting, and a topic it creates is known to every broker before it goes on (else its first
    assignment may leave the topic out, and a rebalance follows at the next metadata refresh: seen on a
    fresh Apache Kafka)."""
    import faust.transport.drivers.aiokafka as driver

    from scheduler.kafka.recovery import fetch_only_what_was_asked, pause_changelogs_in_the_fetch

    fetch_only_what_was_asked()
    pause_changelogs_in_the_fetch()
    driver.Transport._get_controller_node = _answering_controller  # type: ignore[method-assign]
    create = driver.Transport._really_create_topic
    if getattr(create, "_waits_until_visible", False):
        return

    async def create_and_wait(
        self: Any, owner: Any, client: Any, topic: str, partitions: int, replication: int, **kwargs: Any
    ) -> None:
        from scheduler.kafka.producer import visible_everywhere

        await create_retrying(
            lambda: create(self, owner, client, topic, partitions, replication, **kwargs),
            client,
            topic,
        )
        await visible_everywhere(client, [topic])

    create_and_wait._waits_until_visible = True  # type: ignore[attr-defined]
    driver.Transport._really_create_topic = create_and_wait  # type: ignore[method-assign]


def broker_profile(profile: BrokerProfile) -> dict[str, Any]:
    """Faust settings for a broker, each for a reason.

    Tansu (the embedded broker) reports a wrong end offset for a partition whose last batch holds more
    than one record; the consumer profile reads the right one (tansu_end_offsets), so changelogs batch.
    It also holds a group join for half the session timeout, so a short session with a 1 s heartbeat
    keeps worker start and takeover to seconds: 6 s holds a first join 3 s (8 s held it 4 s), and five
    heartbeats can still be lost before the session is.

    On either, no leader topic: Faust elects a leader of the app (the member assigned the one partition of
    `<app>-__assignor-__leader`) for its timers that run on the leader only; nothing here asks who leads,
    and once the changelogs were paused in the fetch (kafka.recovery.pause_changelogs_in_the_fetch) that
    partition was all an idle worker's Faust consumer still fetched, twice a second.
    """
    if profile == "tansu":
        return {
            "topic_disable_leader": True,
            "broker_session_timeout": 6.0,
            "broker_heartbeat_interval": 1.0,
        }
    return {
        "topic_disable_leader": True,
        # A dead worker is noticed after the session timeout, and its schedules fire late until then:
        # Faust's default is 60 s. 10 s rides out a long GC pause. A member hears that a rebalance began
        # only at its next heartbeat, and the rebalance waits for every member: heartbeats every second
        # (not a third of the session, as Kafka advises) so a takeover is not held up to 3 s by the member
        # that heard it last (seen: 2.1 s of a 13.4 s takeover); nine can be lost before the session is.
        "broker_session_timeout": 10.0,
        "broker_heartbeat_interval": 1.0,
        # Every write (hops, changelogs) is acknowledged by all in-sync replicas: with min.insync.replicas
        # 2 on a 3-node cluster, a leader that dies loses nothing it acknowledged (the fires' and the
        # schedules changelog's producer, producer.BatchedProducer, uses acks=all too).
        "producer_acks": -1,
        # An agent hop carries one event at a time and event -> launch is three of them: send at once.
        "producer_linger": 0.0,
        # Kafka creates a topic asynchronously: a topic Faust just created can be missing from the metadata
        # the first assignment is computed from, and Faust's assignor then leaves its partitions out
        # ("Ignoring missing topic") until the consumer's next metadata refresh notices the topic and
        # rejoins: after 5 minutes by default, with the trigger index unread meanwhile (seen on a fresh
        # 1-node Kafka, 2 of ~45 starts). Refreshed every 5 s, the rejoin comes within seconds.
        "consumer_metadata_max_age_ms": 5_000,
    }
