"""Several specs in one plain schedule (issue 39 item 5) end to end: an OR of crons, frequencies and a
one-shot without a program fires at the union of their instants, each once, exactly the instants `/next`
promised; `/next` and `scheduler schedules next` say which spec each instant comes from; what is not an
OR of time triggers is refused with the field named."""

from __future__ import annotations

import time

import pytest

from tests.helpers import Api, TopicReader, fires_of, scheduler_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def worker(shared_worker):  # type: ignore[no-untyped-def]
    return shared_worker


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_an_or_of_time_specs_fires_their_union_each_instant_once(broker, worker, app_id, tenant):
    out = f"{app_id}-out"
    once_at = (now_ms() // 1000 + 7) * 1000 + 500  # (between the crons' whole seconds)
    trigger = {"type": "or", "triggers": [
        {"type": "cron", "expression": "*/2 * * * * *"},
        {"type": "cron", "expression": "*/3 * * * * *"},
        {"type": "once", "at": once_at},
    ]}  # fmt: skip
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        for bad, field in (
            ({"type": "and", "triggers": trigger["triggers"][:2]}, "program"),
            (
                {
                    "type": "or",
                    "triggers": [
                        trigger["triggers"][0],
                        {"type": "partition", "dataset": f"{tenant}.logs", "minPartitions": 1},
                    ],
                },
                "trigger.triggers.1",
            ),  # fmt: skip
        ):
            r = await api.client.post(
                "/schedules", json={"tenant": tenant, "name": "bad", "trigger": bad, "topic": out}
            )
            assert r.status_code == 400 and r.json()["fields"][0]["field"] == field, r.text
        created = await api.create({"tenant": tenant, "name": "u", "trigger": trigger, "topic": out})
        assert created["triggerText"].startswith("(cron */2 * * * * * OR")
        promised = (await api.client.get(f"/schedules/{tenant}/u/next", params={"n": 12})).json()
        assert len(promised["next"]) == 12 and promised["next"] == sorted(set(promised["next"]))
        for at, specs in zip(promised["next"], promised["specs"], strict=True):
            due = [f"0.{i}" for i, ok in enumerate((at % 2000 == 0, at % 3000 == 0, at == once_at)) if ok]
            assert specs == due, (at, specs)
        assert once_at in promised["next"]
        assert promised["specTexts"]["0.2"].startswith("once at")
        window = promised["next"][:8]
        await reader.wait_for(lambda r: any(f.due_at >= window[-1] for f in fires_of(r, "u")), timeout_s=60)
        cli = scheduler_cli(worker.url, "schedules", "next", f"{tenant}/u", "-n", "6")
    fired = [f.due_at for f in fires_of(reader.records, "u") if window[0] <= f.due_at <= window[-1]]
    assert fired == window, "the union fires every promised instant once, and nothing else"
    assert cli.returncode == 0, cli.stderr
    assert "FROM" in cli.stdout and "0.1 cron */3 * * * * *" in cli.stdout, cli.stdout
