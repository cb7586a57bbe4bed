"""The typed internal messages: each decodes what it encodes, and its JSON is the one the worker wrote before
the messages were typed (records in flight during an upgrade still decode)."""

from __future__ import annotations

import json

import pytest

from scheduler.wire.messages import (
    AdoptQueue,
    CancelJobs,
    CheckConstraints,
    IndexEntry,
    IndexUpdate,
    JobTriggered,
    RunStatusChanged,
    TriggerFired,
    decode_job_queue_message,
    encode_job_queue_message,
)

pytestmark = pytest.mark.unit

KEY = bytes.fromhex("0a61636d650e6e696768746c79")


def as_json(value: bytes) -> dict:
    return json.loads(value)


def test_an_index_update_keeps_its_json() -> None:
    update = IndexUpdate("partition:acme.clicks", "acme/nightly", KEY, 3, ("0", "0.1"))
    assert as_json(update.encode()) == {
        "eventKey": "partition:acme.clicks",
        "schedule": "acme/nightly",
        "scheduleKey": KEY.hex(),
        "version": 3,
        "paths": ["0", "0.1"],
    }
    assert IndexUpdate.decode(update.encode()) == update


def test_an_index_entry_replaces_the_schedules_triggers_and_keeps_the_others() -> None:
    entry = IndexEntry().applied(IndexUpdate("k", "acme/a", KEY, 1, ("0", "0.1")))
    entry = entry.applied(IndexUpdate("k", "acme/b", b"\x01", 2, ("0",)))
    entry = entry.applied(IndexUpdate("k", "acme/a", KEY, 2, ("0.2",)))
    assert sorted(entry.triggers) == ["acme/a#0.2", "acme/b#0"]
    assert as_json(entry.encode()) == {
        "triggers": {
            "acme/b#0": {"schedule": "acme/b", "scheduleKey": "01", "version": 2, "path": "0"},
            "acme/a#0.2": {"schedule": "acme/a", "scheduleKey": KEY.hex(), "version": 2, "path": "0.2"},
        }
    }
    assert IndexEntry.decode(entry.encode()) == entry
    assert IndexEntry.decode(None) == IndexEntry()
    assert IndexEntry().applied(IndexUpdate("k", "acme/a", KEY, 0, ())).triggers == {}


def test_an_event_fired_trigger_keeps_its_json() -> None:
    event = {"timestamp": 5, "eventType": "partition", "payload": {"dataset": "acme.clicks"}}
    fired = TriggerFired(KEY, "acme/a", 2, "0.1", source="e3", position=41, at=5, event=event)
    assert as_json(fired.encode()) == {
        "scheduleKey": KEY.hex(),
        "schedule": "acme/a",
        "version": 2,
        "path": "0.1",
        "source": "e3",
        "position": 41,
        "at": 5,
        "event": event,
    }
    assert TriggerFired.decode(fired.encode()) == fired


def test_a_time_fired_trigger_keeps_its_json() -> None:
    fired = TriggerFired(KEY, "acme/a", 2, "0", "t0", 1000, at=1003, due=1000, missed=2, catch_up=True)
    assert as_json(fired.encode()) == {
        "scheduleKey": KEY.hex(),
        "schedule": "acme/a",
        "version": 2,
        "path": "0",
        "source": "t0",
        "position": 1000,
        "due": 1000,
        "at": 1003,
        "missed": 2,
        "catchUp": True,
    }
    assert TriggerFired.decode(fired.encode()) == fired


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (JobTriggered({"job_id": "j"}), {"type": "triggered", "job": {"job_id": "j"}}),
        (
            RunStatusChanged("r1", "RUNNING", 7, "acme/app/workflow/load", {"jobId": "j", "error": ""}),
            {
                "type": "status",
                "runId": "r1",
                "status": "RUNNING",
                "at": 7,
                "program": "acme/app/workflow/load",
                "jobId": "j",
                "error": "",
            },
        ),
        (
            CancelJobs("acme/a", 3, "updated"),
            {"type": "cancel", "schedule": "acme/a", "belowVersion": 3, "reason": "updated"},
        ),
        (
            CancelJobs("acme/a", None, "deleted"),
            {"type": "cancel", "schedule": "acme/a", "belowVersion": None, "reason": "deleted"},
        ),
        (
            AdoptQueue({"program": "group:acme/etl"}),
            {"type": "adopt", "queue": {"program": "group:acme/etl"}},
        ),
        (CheckConstraints(), {"type": "check"}),
    ],
)
def test_a_job_queue_message_keeps_its_json(message: object, expected: dict) -> None:
    value = encode_job_queue_message(message)  # type: ignore[arg-type]
    assert as_json(value) == expected
    assert decode_job_queue_message(value) == message


def test_a_job_queue_message_of_an_unknown_type_is_none_and_a_status_without_program_decodes() -> None:
    assert decode_job_queue_message(b'{"type": "from-a-newer-version"}') is None
    old = b'{"type": "status", "runId": "r", "status": "COMPLETED", "at": 1, "unknown": "x"}'
    assert decode_job_queue_message(old) == RunStatusChanged("r", "COMPLETED", 1, None, {})
