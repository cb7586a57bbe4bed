"""Notifications end to end on a real broker: rules made over the CLI send a schedule's run events to a
real local HTTP endpoint that fails its first calls (retried, none lost, each signed with the tenant's
secret, one id per delivery), while another rule's endpoint is dead (retrying, and blocking nothing); a
run that fails its last retry is RETRIES_EXHAUSTED; the deliveries are visible over HTTP and the CLI."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from scheduler.domain.notifications import DELIVERY_HEADER, SIGNATURE_HEADER, verify
from tests.helpers import Api, free_port, metric, scheduler_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

HOOK_KEY = "hook-signing-key-42"


class FlakyEndpoint:
    """A webhook receiver: answers 500 to its first `failures` calls, then 200; keeps every call."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.calls.append({"body": body, "headers": dict(request.headers), "at": time.time()})
        if len(self.calls) <= self.failures:
            return web.Response(status=500, text="not now")
        return web.Response(status=204)


@pytest.mark.embedded
async def test_run_events_reach_a_flaky_webhook_signed_and_retried_while_a_dead_one_blocks_nothing(
    start_worker, tmp_path: Path
):
    store = tmp_path / "secrets"
    (store / "acme").mkdir(parents=True)
    (store / "acme" / "hook").write_text(HOOK_KEY)
    endpoint, slack = FlakyEndpoint(failures=2), FlakyEndpoint(failures=0)
    app = web.Application()
    app.router.add_post("/hook", endpoint.handle)
    app.router.add_post("/slack", slack.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port, dead_port = free_port(), free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        worker = start_worker(SCHEDULER_LAUNCHER="embedded", SCHEDULER_SECRETS_DIR=str(store))

        def cli(*args: str) -> str:
            done = scheduler_cli(worker.url, *args)
            assert done.returncode == 0, done.stdout + done.stderr
            return done.stdout

        cli("notifications", "put", "acme/ops", "--on", "RUN_FAILED,RETRIES_EXHAUSTED,RUN_SUCCEEDED",
            "--webhook", f"http://127.0.0.1:{port}/hook", "--secret-ref", "acme/hook")  # fmt: skip
        cli("notifications", "put", "acme/dead", "--on", "RUN_FAILED", "--webhook",
            f"http://127.0.0.1:{dead_port}/hook", "--max-attempts", "20")  # fmt: skip
        cli("notifications", "put", "acme/elsewhere", "--on", "RUN_FAILED,RUN_SUCCEEDED", "--schedules",
            "not-these", "--webhook", f"http://127.0.0.1:{port}/other")  # fmt: skip
        # an SLA alert (no job for 2 s) in Slack's format
        cli("notifications", "put", "acme/sla", "--on", "NOT_FIRED", "--format", "slack", "--schedules",
            "stale", "--webhook", f"http://127.0.0.1:{port}/slack")  # fmt: skip
        assert "acme/ops: RETRIES_EXHAUSTED, RUN_FAILED, RUN_SUCCEEDED -> json" in cli(
            "notifications", "list"
        )
        async with httpx.AsyncClient(base_url=worker.url, timeout=30) as client:
            for name, code in (("failing", 3), ("fine", 0)):
                argv = [
                    sys.executable,
                    "-c",
                    f"import sys; print('step {name} ends {code}'); sys.exit({code})",
                ]
                program = f"acme/etl/command/{name}"
                async with Api(worker.url) as api:
                    await api.register(program, {"kind": "command", "argv": argv})
                    await api.create({"tenant": "acme", "name": name, "program": program,
                                      "trigger": {"type": "cron", "expression": "0 0 1 1 *"},
                                      "retry": {"maxAttempts": 2, "initialDelayMs": 500}})  # fmt: skip
            async with Api(worker.url) as api:  # (no job for 2 s: NOT_FIRED)
                await api.create({"tenant": "acme", "name": "stale", "program": program, "fireAtLeastEveryMs": 2_000,
                                  "trigger": {"type": "partition", "dataset": "acme.stale"}})  # fmt: skip
            cli("schedules", "run", "acme/failing")
            cli("schedules", "run", "acme/fine")

            def kinds() -> dict[str, set[str]]:
                out: dict[str, set[str]] = {}
                for call in endpoint.calls:
                    if call["headers"].get("Host", "").endswith(str(port)) and call["body"]:
                        event = json.loads(call["body"])["event"]
                        out.setdefault(call["headers"][DELIVERY_HEADER], set()).add(
                            f"{event['kind']} {event['schedule']} {event['attempt']}"
                        )
                return out

            want = {"RUN_FAILED acme/failing 1", "RUN_FAILED acme/failing 2", "RETRIES_EXHAUSTED acme/failing 2",
                    "RUN_SUCCEEDED acme/fine 1"}  # fmt: skip
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                got = set().union(*kinds().values()) if kinds() else set()
                deliveries = (await client.get("/notifications/acme/ops/deliveries")).json()["deliveries"]
                if (
                    got >= want
                    and len(deliveries) == 4
                    and all(d["outcome"] == "DELIVERED" for d in deliveries)
                    and slack.calls
                ):
                    break
                await asyncio.sleep(0.5)
            assert set().union(*kinds().values()) == want, (kinds(), worker.log_tail())
            assert len(kinds()) == 4, "each event is one delivery (one id), retried under that id"
            assert endpoint.calls[0]["body"] == endpoint.calls[2]["body"], "the 500s' delivery was sent again"
            for call in endpoint.calls:
                assert verify(HOOK_KEY, call["body"], call["headers"][SIGNATURE_HEADER], int(time.time()))
            assert all("/other" not in str(c) for c in endpoint.calls)  # (a rule of other schedules: nothing)
            assert sorted(d["outcome"] for d in deliveries) == ["DELIVERED"] * 4, deliveries
            assert sum(d["attempts"] for d in deliveries) == 4 + 2 and any(
                d["calls"][0]["status"] == 500 for d in deliveries
            )
            failed = next(d for d in deliveries if d["event"]["kind"] == "RETRIES_EXHAUSTED")
            assert (
                "exit code 3" in failed["event"]["error"]
                and "step failing ends 3" in failed["event"]["error"]
            )
            dead = (await client.get("/notifications/acme/dead/deliveries")).json()["deliveries"]
            # (one endpoint's deliveries go in order: the first is retried, the second waits behind it)
            assert sorted(d["outcome"] for d in dead) == ["PENDING", "RETRYING"], dead
            retrying = next(d for d in dead if d["outcome"] == "RETRYING")
            assert "ConnectError" in retrying["error"] and retrying["nextAt"] > retrying["at"], retrying
            assert (await client.get("/notifications/acme/elsewhere/deliveries")).json()["deliveries"] == []
            assert slack.calls, "no NOT_FIRED alert reached the Slack-format rule's endpoint"
            first = json.loads(slack.calls[0]["body"])
            assert first["text"] == "acme/stale: has not fired within its bound", first
            assert first["blocks"][0]["text"]["text"] == f"*{first['text']}*", first
            metrics = (await client.get("/metrics")).text
            sla = (await client.get("/notifications/acme/sla/deliveries")).json()["deliveries"]
            assert sla and all(d["event"]["kind"] == "NOT_FIRED" for d in sla), sla
            sent = metric(metrics, 'scheduler_notifications_total{outcome="DELIVERED"}')
            assert 4 < sent <= 4 + len(sla), (sent, sla)  # (the ops rule's 4, and the SLA alerts so far)
            assert (
                metric(metrics, "scheduler_notification_retries_total") >= 2 + 2
            )  # (the 500s, the dead hook's)
        table = cli("notifications", "deliveries", "acme/ops")
        assert table.count("DELIVERED") == 4 and "RETRIES_EXHAUSTED" in table, table
        cli("notifications", "delete", "acme/dead")
        for _ in range(100):  # (the deletion travels through the rules topic)
            if httpx.get(f"{worker.url}/notifications/acme/dead", timeout=30).status_code == 404:
                break
            time.sleep(0.1)
        assert httpx.get(f"{worker.url}/notifications/acme/dead", timeout=30).status_code == 404
    finally:
        await runner.cleanup()


async def test_a_notifier_whose_consumer_goes_deaf_is_found_stalled_healed_and_sends_what_it_held(
    start_worker,
):
    endpoint = FlakyEndpoint(failures=0)
    app = web.Application()
    app.router.add_post("/hook", endpoint.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        worker = start_worker(SCHEDULER_LAUNCHER="embedded", SCHEDULER_FAILPOINTS="notifier-deaf=once",
                              SCHEDULER_STALL_AFTER_S="3")  # fmt: skip
        done = scheduler_cli(worker.url, "notifications", "put", "acme/ops", "--on", "RUN_SUCCEEDED",
                             "--webhook", f"http://127.0.0.1:{port}/hook")  # fmt: skip
        assert done.returncode == 0, done.stderr
        async with Api(worker.url) as api:
            program = "acme/etl/command/ok"
            await api.register(program, {"kind": "command", "argv": [sys.executable, "-c", "print('ok')"]})
            await api.create({"tenant": "acme", "name": "ok", "program": program,
                              "trigger": {"type": "cron", "expression": "0 0 1 1 *"}})  # fmt: skip
        assert scheduler_cli(worker.url, "schedules", "run", "acme/ok").returncode == 0
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not endpoint.calls:
            await asyncio.sleep(0.3)
        assert endpoint.calls, f"the deaf notifier was never healed:\n{worker.log_tail()}"
        assert json.loads(endpoint.calls[0]["body"])["event"]["kind"] == "RUN_SUCCEEDED"
        metrics = httpx.get(f"{worker.url}/metrics", timeout=30).text
        assert metric(metrics, 'scheduler_loop_heals_total{loop="notifier"}') == 1
        assert metric(metrics, 'scheduler_loop_stalls_total{loop="notifier"}') == 1
    finally:
        await runner.cleanup()
