"""Event-driven scheduling on a real broker: the scenario tables of seeds 003 (CDAP scheduler) and 002
(program-status triggers), one test each, in seconds instead of minutes. The test plays the launcher: it
reads launch requests and publishes the program-status events of the runs (run id = job id).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from scheduler.wire.codec import encode, encode_command, key_bytes
from tests.helpers import (
    SHORT_SESSION,
    Api,
    TopicReader,
    dead_letter,
    decode_launch,
    metric,
    produce,
    scheduler_cli,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

#: this test's tenant, and its programs: the tests share one worker (the module's), and a tenant of their own
#: keeps their schedules, programs, datasets and groups apart. Set for each test by `_names`; a test that
#: starts a worker of its own uses the same names.
T = A = B = SPARK = ETL = ""


@pytest.fixture(autouse=True)
def _names(tenant: str) -> None:
    global T, A, B, SPARK, ETL
    T = tenant
    A, B = f"{T}/pipes/workflow/A", f"{T}/pipes/workflow/B"
    SPARK, ETL = f"{T}/pipes/spark/clean", f"{T}/pipes/workflow/etl"


@pytest.fixture
def worker(shared_worker):  # type: ignore[no-untyped-def]
    return shared_worker


def mine(letters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The dead letters of this test (the dead-letter topic is the shared worker's): those naming its tenant."""
    return [d for d in letters if T.encode() in (d.get("key") or b"") + (d.get("value") or b"")]


def schedule(name: str, trigger: dict[str, Any], program: str, topic: str, **extra: Any) -> dict[str, Any]:
    return {"tenant": T, "name": name, "trigger": trigger, "program": program, "topic": topic, **extra}


def partitions(dataset: str, n: int) -> dict[str, Any]:
    return {"type": "partition", "dataset": dataset, "minPartitions": n}


def on(program: str, *outcomes: str) -> dict[str, Any]:
    return {"type": "programStatus", "program": program, "on": list(outcomes) or ["SUCCEEDED"]}


def of(launches: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [x for x in launches if x["schedule"]["name"] == name]


async def quiet(seconds: float) -> None:
    await asyncio.sleep(seconds)


# --- seed 003: the CDAP scheduler scenarios ---------------------------------------------------------


@pytest.mark.embedded
async def test_scenario_003_1_any_new_partition_with_a_minimum_interval_between_runs(broker, worker, app_id):
    """Five partitions over a short window: the first launches, the rest are skipped (too soon)."""
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(
            schedule(
                "any",
                partitions(f"{T}.feed", 1),
                ETL,
                out,
                constraints=[{"type": "lastRun", "minMs": 60_000, "onUnmet": "SKIP"}],
            )
        )
        for day in range(5):
            await api.partitions(f"{T}.feed", f"2026-11-{day + 10}")
            await quiet(0.4)
        recent = (await api.wait_jobs(lambda j: len(j["recent"]) >= 4, schedule=f"{T}/any"))["recent"]
        await launches.wait_for(lambda r: len(r) >= 1)
        await quiet(1)
    assert len(launches.records) == 1
    assert {r["outcome"] for r in recent} == {"SKIP"} and all(
        "LastRunConstraint" in r["reason"] for r in recent
    )


async def test_scenario_003_2_schedule_properties_are_runtime_args_and_an_update_changes_them(
    broker, worker, app_id
):
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("props", partitions(f"{T}.feed", 1), ETL, out, data={"mode": "full"}))
        await api.partitions(f"{T}.feed", "p1")
        await launches.wait_for(lambda r: len(r) >= 1)
        first = launches.records[0]
        await api.run(ETL, first["jobId"], "STARTING", "RUNNING", "COMPLETED")
        await api.update(
            T,
            "props",
            {
                "trigger": partitions(f"{T}.feed", 1),
                "program": ETL,
                "topic": out,
                "data": {"mode": "incremental"},
            },
        )
        await api.partitions(f"{T}.feed", "p2")
        await launches.wait_for(lambda r: len(r) >= 2)
    assert first["arguments"]["mode"] == "full" and first["arguments"]["trigger.partitionKeys"] == '["p1"]'
    assert launches.records[1]["arguments"]["mode"] == "incremental"


async def test_a_run_id_an_event_made_is_written_into_a_url_as_it_is(broker, worker, app_id):
    """Run ids are job ids; an event-made one (`tenant/name@v1.1`) goes into a run's URL unencoded, as an
    HTTP user copies it from a launch request (a '#' in it would end the path there: a fragment)."""
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("raw-id", partitions(f"{T}.feed", 1), ETL, out))
        await api.partitions(f"{T}.feed", "p1")
        (launch,) = await launches.wait_for(lambda r: len(r) >= 1)
        run_id = launch["jobId"]
        await api.run(ETL, run_id, "STARTING", "RUNNING")
        r = await api.until(f"/programs/{ETL}/runs/{run_id}", lambda r: r.status_code == 200)
    assert run_id.startswith(f"{T}/raw-id@") and r.json()["run_id"] == run_id, r.text


async def test_scenario_003_4_an_update_resets_partition_progress(broker, worker, app_id):
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("five", partitions(f"{T}.feed", 5), ETL, out, data={"v": "1"}))
        await api.partitions(f"{T}.feed", "p1")
        # counted before the update (an event still in flight when the update is applied may count
        # toward either definition: the two topics are not ordered with each other; see the README)
        await api.until(
            f"/schedules/{T}/five/trigger",
            lambda r: r.status_code == 200 and r.json()["trigger"]["partitions"] == 1,
        )
        await api.update(
            T,
            "five",
            {"trigger": partitions(f"{T}.feed", 5), "program": ETL, "topic": out, "data": {"v": "2"}},
        )
        await api.partitions(f"{T}.feed", "p2", "p3", "p4", "p5")
        await quiet(2)
        assert launches.records == [], "launched on partitions counted before the update"
        assert (await api.progress(T, "five"))["trigger"]["partitions"] == 4
        await api.partitions(f"{T}.feed", "p6")
        await launches.wait_for(lambda r: len(r) >= 1)
    assert len(launches.records) == 1 and launches.records[0]["arguments"]["v"] == "2"


async def test_scenario_003_5_an_update_replaces_a_job_waiting_on_its_delay(broker, worker, app_id):
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(
            schedule(
                "delayed",
                partitions(f"{T}.feed", 5),
                ETL,
                out,
                data={"v": "1"},
                constraints=[{"type": "delay", "delayMs": 600_000}],
            )
        )
        await api.partitions(f"{T}.feed", "a", "b", "c", "d", "e")
        waiting = await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule=f"{T}/delayed")
        assert waiting["jobs"][0]["blockedBy"] == "DelayConstraint" and waiting["jobs"][0]["checkAt"] > 0
        await api.update(
            T,
            "delayed",
            {
                "trigger": partitions(f"{T}.feed", 3),
                "program": ETL,
                "topic": out,
                "data": {"v": "2"},
                "constraints": [{"type": "delay", "delayMs": 100}],
            },
        )
        await api.partitions(f"{T}.feed", "f", "g", "h")
        await launches.wait_for(lambda r: len(r) >= 1)
        await quiet(1)
        jobs = await api.jobs(schedule=f"{T}/delayed")
    assert len(launches.records) == 1 and launches.records[0]["arguments"]["v"] == "2"
    assert jobs["jobs"] == [] and [r["outcome"] for r in jobs["recent"]] == ["CANCELLED"]


async def test_scenario_003_6_delete_before_the_trigger_completes_launches_nothing(broker, worker, app_id):
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("gone", partitions(f"{T}.feed", 5), ETL, out))
        await api.create(schedule("witness", partitions(f"{T}.feed", 5), SPARK, out))
        await api.partitions(f"{T}.feed", "a", "b", "c", "d")
        await api.delete(T, "gone")
        await api.partitions(f"{T}.feed", "e")
        await launches.wait_for(lambda r: len(r) >= 1)  # the witness proves the fifth partition arrived
        await quiet(2)
    assert [x["schedule"]["name"] for x in launches.records] == ["witness"]


@pytest.mark.embedded
async def test_scenario_003_7_delete_cancels_a_job_waiting_on_its_delay(broker, worker, app_id):
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(
            schedule(
                "wait",
                partitions(f"{T}.feed", 5),
                ETL,
                out,
                constraints=[{"type": "delay", "delayMs": 4_000}],
            )
        )
        await api.partitions(f"{T}.feed", "a", "b", "c", "d", "e")
        job = (await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule=f"{T}/wait"))["jobs"][0]
        await asyncio.sleep(max(0.0, (job["checkAt"] - 500) / 1000 - time.time()))
        await api.delete(T, "wait")
        await asyncio.sleep(max(0.0, job["checkAt"] / 1000 - time.time()) + 2)
    assert launches.records == []


@pytest.mark.embedded
async def test_a_user_cancels_one_pending_job_and_the_next_one_still_launches(broker, worker, app_id):
    """Issue 39: DELETE /jobs/{id} (and `scheduler jobs cancel`): the job never launches, its outcome is
    CANCELLED by its canceller; the schedule goes on; a job that is not pending is a 404."""
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(
            schedule("held", partitions(f"{T}.feed", 1), ETL, out, constraints=[{"type": "delay", "delayMs": 3_000}])
        )  # fmt: skip
        await api.partitions(f"{T}.feed", "a")
        job = (await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule=f"{T}/held"))["jobs"][0]
        cancelled = 'scheduler_job_outcomes_total{outcome="CANCELLED"}'
        before = metric((await api.client.get("/metrics")).text, cancelled)
        r = await api.client.delete(f"/jobs/{job['jobId']}")
        assert r.status_code == 202 and r.json() == {
            "jobId": job["jobId"],
            "queue": ETL,
            "action": "CANCEL",
        }, r.text
        gone = await api.wait_jobs(
            lambda j: not j["jobs"] and any(o["outcome"] == "CANCELLED" for o in j["recent"]),
            schedule=f"{T}/held",
        )
        assert [o["reason"] for o in gone["recent"] if o["jobId"] == job["jobId"]] == [
            "cancelled by auth-off"
        ]
        assert metric((await api.client.get("/metrics")).text, cancelled) >= before + 1
        for missing in (job["jobId"], f"{T}/held@1", "no-job-id", f"{T}/nope@1"):
            r = await api.client.delete(f"/jobs/{missing}")
            assert r.status_code == 404, (missing, r.text)
        await asyncio.sleep(max(0.0, job["checkAt"] / 1000 - time.time()) + 1.5)
        assert of(launches.records, "held") == []
        await api.partitions(f"{T}.feed", "b")  # (the next one: cancelled from the CLI)
        second = (await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule=f"{T}/held"))["jobs"][0]
        cli = scheduler_cli(worker.url, "jobs", "cancel", second["jobId"])
        assert cli.returncode == 0 and "cancel accepted" in cli.stdout, cli.stdout + cli.stderr
        await api.wait_jobs(
            lambda j: (
                not j["jobs"]
                and {o["jobId"] for o in j["recent"] if o["outcome"] == "CANCELLED"}
                >= {job["jobId"], second["jobId"]}
            ),
            schedule=f"{T}/held",
        )
        again = scheduler_cli(worker.url, "jobs", "cancel", second["jobId"])
        assert again.returncode != 0 and "404" in again.stdout + again.stderr, again.stdout + again.stderr
        await api.partitions(f"{T}.feed", "c")  # (the next job of the schedule launches as ever)
        await launches.wait_for(lambda r: len(of(r, "held")) == 1)


@pytest.mark.embedded
async def test_a_schedule_pauses_itself_after_pause_on_failure_jobs_in_a_row_failed(broker, worker, app_id):
    """Issue 39 (Temporal's pause_on_failure): pauseOnFailure 2, two jobs FAILED -> disabled, with a note
    saying why, by `pauseOnFailure`; a COMPLETED job in between starts the count again."""
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("fragile", partitions(f"{T}.feed", 1), ETL, out, pauseOnFailure=2))
        for n, end in enumerate(("FAILED", "COMPLETED", "FAILED", "FAILED"), 1):
            await api.partitions(f"{T}.feed", f"p{n}")
            await launches.wait_for(lambda r, n=n: len(of(r, "fragile")) == n)
            await api.run(ETL, of(launches.records, "fragile")[-1]["jobId"], "STARTING", "RUNNING", end)
            if n == 3:
                await quiet(1)
                assert (await api.client.get(f"/schedules/{T}/fragile")).json()["enabled"] is True
        await api.until(f"/schedules/{T}/fragile", lambda r: r.json()["enabled"] is False, timeout_s=20)
        paused = (await api.client.get(f"/schedules/{T}/fragile")).json()["paused"]
        history = (await api.client.get(f"/schedules/{T}/fragile/history")).json()["versions"]
    assert paused["by"] == "pauseOnFailure" and paused["note"].startswith(
        "paused after 2 jobs in a row FAILED"
    )
    assert history[0]["action"] == "DISABLE" and history[0]["by"] == "pauseOnFailure"


async def test_scenario_003_8_a_trigger_with_several_constraints_launches_only_when_all_hold(
    broker, worker, app_id
):
    out = f"{app_id}-launches"
    now = datetime.now(ZoneInfo("Asia/Tokyo"))
    window = {
        "type": "timeWindow",
        "start": (now - timedelta(minutes=5)).strftime("%H:%M"),
        "end": (now + timedelta(minutes=30)).strftime("%H:%M"),
        "timezone": "Asia/Tokyo",
    }
    constraints = [
        {"type": "delay", "delayMs": 1_500},
        {"type": "concurrency", "maxRuns": 1},
        window,
        {"type": "rate", "maxRuns": 2, "unit": "HOURS"},
    ]
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("all", partitions(f"{T}.feed", 1), ETL, out, constraints=constraints))
        await api.partitions(f"{T}.feed", "a")
        await launches.wait_for(lambda r: len(r) >= 1)
        first = launches.records[0]
        assert first["launchedAt"] - first["triggeredAt"] >= 1_500, "launched before its delay"
        await api.run(ETL, first["jobId"], "STARTING", "RUNNING")
        await api.partitions(f"{T}.feed", "b")
        held = await api.wait_jobs(
            lambda j: any(x["blockedBy"] == "ConcurrencyConstraint" for x in j["jobs"]), schedule=f"{T}/all"
        )
        assert held["jobs"][0]["reason"].startswith("1 run active")
        await api.run(ETL, first["jobId"], "COMPLETED")
        await launches.wait_for(lambda r: len(r) >= 2)
        await api.run(ETL, launches.records[1]["jobId"], "STARTING", "COMPLETED")
        await api.partitions(f"{T}.feed", "c")  # a third run within the hour: the rate limit holds it
        held = await api.wait_jobs(
            lambda j: any(x["blockedBy"] == "RateConstraint" for x in j["jobs"]), schedule=f"{T}/all"
        )
        await quiet(2)
    assert len(launches.records) == 2
    assert held["jobs"][0]["checkAt"] >= first["launchedAt"] + 3_600_000


# --- seed 002: program-status triggers --------------------------------------------------------------


@pytest.mark.embedded
async def test_scenario_002_1_b_runs_after_a_succeeded(broker, worker, app_id):
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("a", {"type": "frequency", "timeUnit": "SECONDS", "time": 2}, A, out))
        await api.create(schedule("b", on(A, "SUCCEEDED"), B, out))
        await launches.wait_for(lambda r: len(of(r, "a")) >= 1)
        a_run = of(launches.records, "a")[0]["jobId"]
        await api.run(A, a_run, "STARTING", "RUNNING", "COMPLETED")
        await launches.wait_for(lambda r: len(of(r, "b")) >= 1)
    b = of(launches.records, "b")[0]
    assert b["program"]["name"] == "B" and b["arguments"]["trigger.runId"] == a_run
    assert b["arguments"]["trigger.status"] == "COMPLETED"


async def test_scenario_002_2_b_does_not_run_when_a_failed(broker, worker, app_id):
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("b-on-success", on(A, "SUCCEEDED"), B, out))
        await api.create(schedule("cleanup-on-failure", on(A, "FAILED"), SPARK, out))
        await api.run(A, "run-1", "STARTING", "RUNNING", "FAILED")
        await launches.wait_for(lambda r: len(of(r, "cleanup-on-failure")) >= 1)
        await quiet(1.5)
    assert of(launches.records, "b-on-success") == []


async def test_scenario_002_3_b_deleted_while_a_runs_never_runs(broker, worker, app_id):
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("b", on(A), B, out))
        await api.create(schedule("witness", on(A), SPARK, out))
        await api.run(A, "run-1", "STARTING", "RUNNING")
        await api.delete(T, "b")  # "500 ms before A completes"
        await quiet(0.5)
        await api.run(A, "run-1", "COMPLETED")
        await launches.wait_for(lambda r: len(of(r, "witness")) >= 1)
        await quiet(1.5)
    assert of(launches.records, "b") == []


async def test_scenario_002_4_a_spark_program_that_succeeded_starts_the_schedule(broker, worker, app_id):
    """The Spark program's status arrives the way any system reports it: Avro on the events topic."""
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("after-spark", on(SPARK, "SUCCEEDED"), B, out))
        records = []
        for status in ("STARTING", "RUNNING", "COMPLETED"):
            n = {
                "timestamp": int(time.time() * 1000),
                "eventType": "program-status",
                "payload": {"programId": SPARK, "runId": "spark-run-7", "status": status},
            }
            records.append((f"program:{SPARK}".encode(), encode("Notification", n)))
        await produce(broker.bootstrap_servers, worker.topic("events"), records)
        await launches.wait_for(lambda r: len(r) >= 1)
    assert launches.records[0]["arguments"]["trigger.runId"] == "spark-run-7"


async def test_scenario_002_5_b_does_not_run_when_a_completes_outside_its_time_window(broker, worker, app_id):
    """Seed 002's table: A completes before B's window opens; B "should not run". A time window that does
    not say what to do (onUnmet) skips the job of a schedule triggered by another program; SUCCESSFUL is
    written as the seed writes it. The same window on a data-triggered schedule waits (seed 003's
    maintenance workflow), and onUnmet WAIT says so for a program-triggered one."""
    out = f"{app_id}-launches"
    zone = ZoneInfo("America/Los_Angeles")
    now = datetime.now(zone)
    start, end = now + timedelta(hours=2), now + timedelta(hours=3)
    window = {
        "type": "timeWindow",
        "start": start.strftime("%H:%M"),
        "end": end.strftime("%H:%M"),
        "timezone": "America/Los_Angeles",
    }
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        b = await api.create(schedule("b", on(A, "SUCCESSFUL"), B, out, constraints=[window]))
        assert b["trigger"]["on"] == ["SUCCEEDED"] and b["constraints"][0]["onUnmet"] == "SKIP"
        waits = await api.create(
            schedule("b-waits", on(A), ETL, out, constraints=[{**window, "onUnmet": "WAIT"}])
        )
        assert waits["constraints"][0]["onUnmet"] == "WAIT"
        data = await api.create(
            schedule("on-data", partitions(f"{T}.feed", 1), SPARK, out, constraints=[window])
        )
        assert data["constraints"][0]["onUnmet"] == "WAIT"
        await api.run(A, "run-1", "STARTING", "COMPLETED")
        await api.partitions(f"{T}.feed", "p1")
        skipped = await api.wait_jobs(lambda j: bool(j["recent"]), schedule=f"{T}/b")
        held = (await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule=f"{T}/b-waits"))["jobs"][0]
        on_data = (await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule=f"{T}/on-data"))["jobs"][0]
        await quiet(1)
        assert (await api.jobs(schedule=f"{T}/b"))["jobs"] == []
    assert launches.records == []
    assert skipped["recent"][0]["outcome"] == "SKIP" and "outside" in skipped["recent"][0]["reason"]
    opens = int(start.replace(second=0, microsecond=0).timestamp() * 1000)
    for job in (held, on_data):
        assert job["blockedBy"] == "TimeWindowConstraint" and job["checkAt"] == opens


# --- composite triggers, concurrency, timeouts -------------------------------------------------------


@pytest.mark.embedded
async def test_and_of_a_succeeded_and_two_partitions_fires_only_when_both_hold(broker, worker, app_id):
    out = f"{app_id}-launches"
    both = {"type": "and", "triggers": [on(A), partitions(f"{T}.feed", 2)]}
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("both", both, ETL, out))
        await api.partitions(f"{T}.feed", "a", "b")
        await quiet(1.5)
        assert launches.records == []
        progress = (await api.progress(T, "both"))["trigger"]
        assert [t["satisfied"] for t in progress["triggers"]] == [False, True]
        await api.run(A, "run-1", "COMPLETED")
        await launches.wait_for(lambda r: len(r) >= 1)
        await api.partitions(f"{T}.feed", "c", "d")  # progress started again: partitions alone do nothing
        await quiet(1.5)
    assert len(launches.records) == 1 and launches.records[0]["arguments"]["trigger.events"] == "2"


async def test_or_of_a_succeeded_or_two_partitions_fires_on_either(broker, worker, app_id):
    out = f"{app_id}-launches"
    either = {"type": "or", "triggers": [on(A), partitions(f"{T}.feed", 2)]}
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("either", either, ETL, out))
        await api.run(A, "run-1", "COMPLETED")
        await launches.wait_for(lambda r: len(r) >= 1)
        await api.partitions(f"{T}.feed", "a", "b")
        await launches.wait_for(lambda r: len(r) >= 2)
    assert [x["arguments"]["trigger.eventType"] for x in launches.records] == ["program-status", "partition"]


async def _launched_as_promised(
    broker: Any, worker: Any, app_id: str, name: str, tree: dict[str, Any], n: int
) -> tuple[list[int], list[int]]:
    """Create a schedule of `tree`, read its `/next` (n instants), then the instants its launches came for
    from the first promised to the last: (promised, launched)."""
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule(name, tree, ETL, out))
        promised = (await api.client.get(f"/schedules/{T}/{name}/next", params={"n": str(n)})).json()["next"]
        assert len(promised) == n
        await launches.wait_for(
            lambda r: any(int(x["arguments"]["trigger.due"]) >= promised[-1] for x in of(r, name)),
            timeout_s=(promised[-1] - time.time() * 1000) / 1000 + 20,
        )
        await quiet(1)  # (a second launch of the last instant would come now)
    launched = [int(x["arguments"]["trigger.due"]) for x in of(launches.records, name)]
    return promised, [t for t in launched if promised[0] <= t <= promised[-1]]


@pytest.mark.embedded
async def test_an_or_of_two_time_triggers_due_at_one_instant_launches_it_once(broker, worker, app_id):
    """Issue 39: OR(*/5 s, */10 s) launched :00, :10 … twice (each child made a job). One instant, one job."""
    either = {"type": "or", "triggers": [
        {"type": "cron", "expression": "*/2 * * * * *"}, {"type": "cron", "expression": "*/4 * * * * *"},
    ]}  # fmt: skip
    promised, launched = await _launched_as_promised(broker, worker, app_id, "either-time", either, 5)
    assert [b - a for a, b in itertools.pairwise(promised)] == [2000] * 4
    assert launched == promised, "an instant launched twice, or one /next promised did not launch"


@pytest.mark.embedded
async def test_an_and_of_two_frequencies_launches_at_the_instants_next_promised(broker, worker, app_id):
    """Issue 39: `/next` of AND(every 4 s, every 6 s) listed every instant of either child; it launches when
    both came due since the last job. AND(every 2 s, every 3 s): at 3, 6, 9 … s."""
    both = {"type": "and", "triggers": [
        {"type": "frequency", "timeUnit": "SECONDS", "time": 2},
        {"type": "frequency", "timeUnit": "SECONDS", "time": 3},
    ]}  # fmt: skip
    promised, launched = await _launched_as_promised(broker, worker, app_id, "both-time", both, 4)
    assert [b - a for a, b in itertools.pairwise(promised)] == [3000] * 3
    assert launched == promised


# --- seed 000: a repeated trigger ("program P succeeded N times") and a lifecycle trigger ("P started") ---


async def test_b_runs_after_a_succeeded_three_times_each_run_counting_once(broker, worker, app_id):
    out = f"{app_id}-launches"
    thrice = {"type": "programRuns", "program": A, "runs": 3, "on": ["SUCCEEDED"]}
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        created = await api.create(schedule("after-3", thrice, B, out))
        assert created["triggerText"] == f"{A} SUCCEEDED 3 times"
        await api.run(A, "run-1", "STARTING", "RUNNING", "COMPLETED")
        await api.status(A, "run-1", "COMPLETED")  # the same run reported again: still one
        await api.run(A, "run-2", "STARTING", "RUNNING", "FAILED")
        await api.run(A, "run-3", "STARTING", "RUNNING", "COMPLETED")
        await api.until(
            f"/schedules/{T}/after-3/trigger",
            lambda r: r.status_code == 200 and r.json()["trigger"].get("runs") == 2,
        )
        progress = (await api.progress(T, "after-3"))["trigger"]
        assert progress["text"] == f"2 of 3 runs of {A} SUCCEEDED" and not progress["satisfied"]
        await quiet(1.0)
        assert launches.records == []
        await api.run(A, "run-4", "COMPLETED")
        await launches.wait_for(lambda r: len(r) >= 1)
        await api.until(
            f"/schedules/{T}/after-3/trigger", lambda r: r.status_code == 200 and r.json()["jobsCreated"] == 1
        )
        assert (await api.progress(T, "after-3"))["trigger"]["runs"] == 0  # counting starts again
    launch = launches.records[0]
    assert launch["program"]["name"] == "B" and launch["arguments"]["trigger.events"] == "3"
    assert launch["arguments"]["trigger.runId"] == "run-4"


async def test_b_runs_when_a_run_of_a_starts_not_before(broker, worker, app_id):
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        created = await api.create(schedule("on-start", {"type": "programStarted", "program": A}, B, out))
        assert created["triggerText"] == f"{A} started"
        await api.create(schedule("on-success", on(A), SPARK, out))
        await api.run(A, "run-1", "PENDING", "STARTING")
        await api.until(
            f"/schedules/{T}/on-start/trigger",
            lambda r: (
                r.status_code == 200 and r.json()["trigger"]["text"] == f"{A} starting a run: not seen yet"
            ),
        )
        await quiet(1.0)
        assert launches.records == []
        await api.status(A, "run-1", "RUNNING")
        await launches.wait_for(lambda r: len(of(r, "on-start")) >= 1)
        await quiet(1.0)
        assert of(launches.records, "on-success") == []  # the run has not ended
        await api.status(A, "run-1", "COMPLETED")
        await launches.wait_for(lambda r: len(of(r, "on-success")) >= 1)
    started = of(launches.records, "on-start")
    assert len(started) == 1 and started[0]["arguments"]["trigger.status"] == "RUNNING"


@pytest.mark.embedded
async def test_concurrency_one_holds_the_second_job_until_the_first_run_ends(broker, worker, app_id):
    """Launched-but-not-started (PENDING), STARTING and RUNNING runs all count against the limit."""
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(
            schedule(
                "one",
                partitions(f"{T}.feed", 1),
                ETL,
                out,
                constraints=[{"type": "concurrency", "maxRuns": 1}],
            )
        )
        await api.partitions(f"{T}.feed", "a")
        await launches.wait_for(lambda r: len(r) >= 1)
        await api.partitions(f"{T}.feed", "b")  # the first run is launched but not yet STARTING
        await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule=f"{T}/one")
        run = launches.records[0]["jobId"]
        await api.run(ETL, run, "STARTING")
        await quiet(0.5)
        await api.run(ETL, run, "RUNNING")
        await quiet(1)
        assert len(launches.records) == 1
        await api.run(ETL, run, "COMPLETED")
        await launches.wait_for(lambda r: len(r) >= 2)


@pytest.mark.parametrize("action", ["DISCARD", "FORCE_START"])
async def test_pending_timeout_discards_or_force_starts(broker, worker, app_id, action):
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(
            schedule(
                "t",
                partitions(f"{T}.feed", 1),
                ETL,
                out,
                constraints=[{"type": "concurrency", "maxRuns": 1}],
                timeout={"timeoutMs": 1_500, "action": action},
            )
        )
        await api.run(ETL, "manual-run", "STARTING", "RUNNING")  # a run nobody will finish
        await api.partitions(f"{T}.feed", "a")
        jobs = await api.wait_jobs(
            lambda j: bool(j["recent"]) or not j["jobs"] and len(launches.records) > 0,
            schedule=f"{T}/t",
            timeout_s=10,
        )
        await quiet(1)
    if action == "DISCARD":
        assert launches.records == [] and jobs["recent"][0]["outcome"] == "DISCARD"
    else:
        assert len(launches.records) == 1 and launches.records[0]["forced"] is True


async def test_disable_drops_pending_jobs_and_enable_starts_trigger_progress_again(broker, worker, app_id):
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(
            schedule(
                "d", partitions(f"{T}.feed", 2), ETL, out, constraints=[{"type": "delay", "delayMs": 60_000}]
            )
        )
        await api.partitions(f"{T}.feed", "a", "b")
        await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule=f"{T}/d")
        assert (await api.client.post(f"/schedules/{T}/d/disable")).status_code == 202
        jobs = await api.wait_jobs(lambda j: not j["jobs"], schedule=f"{T}/d")
        assert jobs["recent"][0]["outcome"] == "CANCELLED"
        await api.partitions(f"{T}.feed", "c")  # while disabled: not counted
        assert (await api.client.post(f"/schedules/{T}/d/enable")).status_code == 202
        await api.until(f"/schedules/{T}/d", lambda r: r.json()["enabled"])
        # an event right after the enable counts, even if the trigger index has not caught up with the
        # enable yet (it is routed with the disabled version); "c", sent while disabled, never does
        await api.partitions(f"{T}.feed", "d")
        await api.until(
            f"/schedules/{T}/d/trigger",
            lambda r: r.status_code == 200 and r.json()["trigger"]["partitions"] >= 1,
        )
        await quiet(1)
        assert (await api.progress(T, "d"))["trigger"]["partitions"] == 1
    assert launches.records == []


# --- events are never lost to timing ------------------------------------------------------------------


@pytest.mark.embedded
async def test_an_event_sent_right_after_the_202_of_the_schedule_that_watches_it_reaches_it(
    broker, worker, app_id
):
    """No wait for the trigger index between the two: the schedule's command and each event race through
    the worker's hops; every event must still make its schedule's job (10 schedules, 10 races)."""
    out = f"{app_id}-launches"
    n = 10
    async with (
        Api(worker.url) as api,
        TopicReader(broker.bootstrap_servers, out, decode_launch) as launches,
        TopicReader(broker.bootstrap_servers, worker.topic("dead-letters"), dead_letter) as dlq,
    ):
        await api.register(ETL)
        for i in range(n):
            body = {**schedule(f"race{i}", partitions(f"{T}.race{i}", 1), ETL, out), "enabled": True}
            assert (await api.client.post("/schedules", json=body)).status_code == 202
            await api.partitions(f"{T}.race{i}", "p0")  # at once: the index has not caught up yet
        await launches.wait_for(lambda r: len(r) >= n, timeout_s=60)
        await quiet(1)
    assert sorted(x["schedule"]["name"] for x in launches.records) == sorted(f"race{i}" for i in range(n))
    assert mine(dlq.records) == []


async def test_an_event_of_a_dataset_nobody_watches_is_counted_not_dead_lettered_and_an_event_before_the_schedule_does_not_count(
    broker, worker, app_id
):
    out = f"{app_id}-launches"
    async with (
        Api(worker.url) as api,
        TopicReader(broker.bootstrap_servers, out, decode_launch) as launches,
        TopicReader(broker.bootstrap_servers, worker.topic("dead-letters"), dead_letter) as dlq,
    ):
        unwatched = (await api.client.get("/health")).json().get("unwatched", 0)
        await api.partitions(f"{T}.later", "before")  # nobody watches it yet
        await api.until("/health", lambda r: r.json().get("unwatched", 0) > unwatched)
        await quiet(1)  # (the event was recorded before the schedule is asked for)
        await api.create(schedule("later", partitions(f"{T}.later", 1), ETL, out))
        await quiet(2)
        assert launches.records == []  # the event before the schedule was asked for does not count
        await api.partitions(f"{T}.later", "after")
        await launches.wait_for(lambda r: len(r) >= 1)
        await quiet(1)
    assert len(launches.records) == 1 and mine(dlq.records) == []


# --- failures and bad input ------------------------------------------------------------------------


@pytest.mark.embedded
@pytest.mark.serial
async def test_a_worker_killed_while_a_job_waits_on_its_delay_launches_it_once_after_restart(
    broker, start_worker, app_id, tmp_path
):
    out = f"{app_id}-launches"
    first = start_worker(**SHORT_SESSION)
    async with Api(first.url) as api:
        await api.create(
            schedule(
                "survivor",
                partitions(f"{T}.feed", 1),
                ETL,
                out,
                constraints=[{"type": "delay", "delayMs": 5_000}],
            )
        )
        await api.partitions(f"{T}.feed", "a")
        job = (await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule=f"{T}/survivor"))["jobs"][0]
    first.kill()
    second = start_worker(SCHEDULER_DATA_DIR=str(tmp_path / "elsewhere"))  # state from the changelogs
    async with TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await launches.wait_for(lambda r: len(r) >= 1, timeout_s=60)
        await quiet(2)
    assert [x["jobId"] for x in launches.records] == [job["jobId"]]
    assert launches.records[0]["launchedAt"] >= job["checkAt"]
    assert second.health()["launches"] == 1


@pytest.mark.embedded
async def test_bad_events_are_dead_lettered_and_good_ones_still_count(broker, worker, app_id):
    out = f"{app_id}-launches"
    good = {
        "timestamp": 1,
        "eventType": "partition",
        "payload": {"datasetId": f"{T}.feed", "partitionKeys": '["a"]'},
    }
    bad = {
        "undecodable": (f"partition:{T}.feed".encode(), b"\x01\x02garbage"),
        "unknown type": (
            b"x",
            encode("Notification", {"timestamp": 1, "eventType": "meteor", "payload": {}}),
        ),
        "bad payload": (
            f"partition:{T}.feed".encode(),
            encode(
                "Notification", {**good, "payload": {"datasetId": f"{T}.feed", "partitionKeys": "not json"}}
            ),
        ),
    }
    reasons = {
        "undecodable": "not a valid Avro Notification",
        "unknown type": "unknown event type",
        "bad payload": "partitionKeys",
    }
    async with (
        Api(worker.url) as api,
        TopicReader(broker.bootstrap_servers, out, decode_launch) as launches,
        TopicReader(broker.bootstrap_servers, worker.topic("dead-letters"), dead_letter) as dlq,
    ):
        await api.create(schedule("feed", partitions(f"{T}.feed", 2), ETL, out))
        records = [(f"partition:{T}.feed".encode(), encode("Notification", good))]
        records += list(bad.values())
        records += [(f"partition:{T}.feed".encode(), encode("Notification", good))]
        await produce(broker.bootstrap_servers, worker.topic("events"), records)
        values = {value for _, value in bad.values()}
        await dlq.wait_for(lambda r: len([d for d in r if d["value"] in values]) >= len(bad))
        await launches.wait_for(lambda r: len(r) >= 1)
    by_value = {d["value"]: d for d in dlq.records}
    for kind, (_, value) in bad.items():
        assert reasons[kind] in by_value[value]["reason"], (kind, by_value[value]["reason"])


async def test_an_event_schedule_from_the_commands_topic_is_indexed_like_one_from_http(
    broker, worker, app_id
):
    from scheduler.domain.model import (
        Action,
        PartitionTrigger,
        ProgramId,
        Schedule,
        ScheduleCommand,
        ScheduleKey,
    )

    out = f"{app_id}-launches"
    s = Schedule(
        ScheduleKey(T, "topic-made"),
        PartitionTrigger(f"{T}.feed", 1),
        out,
        enabled=True,
        program=ProgramId.parse(ETL),
    )
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.register(ETL)
        await produce(
            broker.bootstrap_servers,
            worker.topic("commands"),
            [(key_bytes(s.key), encode_command(ScheduleCommand(s.key, Action.INSERT, s)))],
        )
        made = await api.until(f"/schedules/{T}/topic-made", lambda r: r.status_code == 200)
        await api.indexed(made.json())  # indexed as one from HTTP is
        await api.partitions(f"{T}.feed", "a")
        await launches.wait_for(lambda r: len(r) >= 1)


async def test_at_least_every_t_and_sooner_when_enough_data_arrived(broker, worker, app_id):
    """CDAP user story: run at least every T, but sooner as soon as N bytes arrived (sizes in seconds/bytes)."""
    out = f"{app_id}-launches"
    trigger = {
        "type": "or",
        "triggers": [
            {"type": "dataSize", "dataset": f"{T}.feed", "minBytes": 1_000},
            {"type": "elapsed", "ms": 3_000},
        ],
    }
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        created = await api.create(schedule("bursty", trigger, ETL, out))
        await launches.wait_for(lambda r: len(r) >= 1, timeout_s=20)  # nothing arrived: T passed
        by_time = launches.records[0]
        await api.partitions(f"{T}.feed", "a", size=600)
        await api.partitions(f"{T}.feed", "b", size=600)
        await launches.wait_for(lambda r: len(r) >= 2)
        by_data = launches.records[1]
    assert by_time["launchedAt"] >= created["activeSince"] + 3_000
    assert by_time["arguments"]["trigger.eventType"] == "time"
    assert by_data["arguments"]["trigger.eventType"] == "partition"
    assert by_data["launchedAt"] - by_time["launchedAt"] < 3_000, "the data did not launch sooner"


async def test_t_since_the_last_event_waits_for_the_data_to_stop_arriving(broker, worker, app_id):
    """A feed arriving in chunks: launch once, two seconds after the last chunk."""
    out = f"{app_id}-launches"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(
            schedule("settled", {"type": "elapsed", "ms": 2_000, "dataset": f"{T}.feed"}, ETL, out)
        )
        for chunk in range(4):
            await api.partitions(f"{T}.feed", f"chunk-{chunk}")
            await quiet(0.8)
        last_chunk = int(time.time() * 1000) - 800
        await launches.wait_for(lambda r: len(r) >= 1)
        await quiet(3)
    assert len(launches.records) == 1
    assert launches.records[0]["launchedAt"] >= last_chunk + 2_000


async def test_a_concurrency_group_limits_runs_across_programs(broker, worker, app_id):
    """Two programs sharing a cluster: at most one run of either at a time."""
    out = f"{app_id}-launches"
    group = [{"type": "concurrency", "maxRuns": 1, "group": "small-cluster"}]
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await api.create(schedule("x", partitions(f"{T}.x", 1), A, out, constraints=group))
        await api.create(schedule("y", partitions(f"{T}.y", 1), B, out, constraints=group))
        await api.partitions(f"{T}.x", "1")
        await launches.wait_for(lambda r: len(r) >= 1)
        await api.partitions(f"{T}.y", "1")
        held = await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule=f"{T}/y")
        assert "in group small-cluster" in held["jobs"][0]["reason"]
        x_run = launches.records[0]["jobId"]
        await api.run(A, x_run, "STARTING", "RUNNING")
        await quiet(1)
        assert len(launches.records) == 1
        await api.run(A, x_run, "COMPLETED")  # reported as program A's status: reaches the group's queue
        await launches.wait_for(lambda r: len(r) >= 2)
    assert [x["program"]["name"] for x in launches.records] == ["A", "B"]
