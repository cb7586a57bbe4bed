"""Events: what a notification parses into, its event key, and every way a notification is refused."""

from __future__ import annotations

import json

import pytest

from scheduler.domain.events import (
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_ENTRIES,
    PROGRAM_STATUSES,
    DataEvent,
    EventType,
    InvalidEvent,
    Notification,
    ProgramStatusEvent,
    dataset_key,
    event_key,
    parse,
    program_key,
    validate_dataset,
)
from scheduler.domain.model import InvalidSchedule, ProgramId
from scheduler.wire import codec

pytestmark = pytest.mark.unit

T0 = 1_704_067_200_000
ETL = ProgramId("sales", "etl", "workflow", "daily")


def partition(dataset: str = "sales.orders", keys: object = ("2024-01-01",), **extra: str) -> Notification:
    payload = {"datasetId": dataset, "partitionKeys": json.dumps(list(keys)), **extra}  # type: ignore[call-overload]
    return Notification(T0, "partition", payload)


def data(dataset: str = "sales.orders", **extra: str) -> Notification:
    return Notification(T0, "data", {"datasetId": dataset, **extra})


def status(program: str = ETL.id, run_id: str = "run-1", status: str = "COMPLETED") -> Notification:
    return Notification(T0, "program-status", {"programId": program, "runId": run_id, "status": status})


def refused(n: Notification) -> str:
    with pytest.raises(InvalidEvent) as exc:
        parse(n)
    return str(exc.value)


# --- what a notification carries -----------------------------------------------------------------


def test_event_type_names() -> None:
    assert [t.value for t in EventType] == ["partition", "data", "program-status", "sensor"]


def test_partition_event_counts_the_partition_keys_of_the_json_list() -> None:
    n = partition(keys=["2024-01-01/eu", "2024-01-01/us", "2024-01-01/apac"], bytes="4096")
    assert parse(n) == DataEvent("sales.orders", 3, 4096)


def test_partition_keys_may_be_any_json_values() -> None:
    n = partition(keys=[{"date": "2024-01-01"}, 7])
    assert parse(n).partitions == 2  # type: ignore[union-attr]


def test_partition_event_without_bytes_has_zero_bytes() -> None:
    assert parse(partition()) == DataEvent("sales.orders", 1, 0)


def test_data_event_carries_bytes_and_no_partitions() -> None:
    assert parse(data(bytes="1048576")) == DataEvent("sales.orders", 0, 1_048_576)


def test_data_event_ignores_partition_keys() -> None:
    n = data(bytes="10", partitionKeys='["a", "b"]')
    assert parse(n) == DataEvent("sales.orders", 0, 10)


def test_data_event_without_bytes_is_zero_bytes() -> None:
    assert parse(data()) == DataEvent("sales.orders", 0, 0)


@pytest.mark.parametrize("st", PROGRAM_STATUSES)
def test_program_status_event_for_every_known_status(st: str) -> None:
    assert parse(status(status=st)) == ProgramStatusEvent(ETL, "run-1", st)


def test_extra_payload_entries_are_ignored() -> None:
    assert parse(data(bytes="1", owner="alice")) == DataEvent("sales.orders", 0, 1)


# --- event keys ----------------------------------------------------------------------------------


def test_data_events_are_keyed_by_dataset() -> None:
    assert event_key(parse(partition())) == "partition:sales.orders"
    assert event_key(parse(data(bytes="5"))) == "partition:sales.orders"
    assert dataset_key("sales.orders") == "partition:sales.orders"


def test_program_status_events_are_keyed_by_program() -> None:
    assert event_key(parse(status())) == "program:sales/etl/workflow/daily"
    assert program_key(ETL) == "program:sales/etl/workflow/daily"


# --- refused notifications -----------------------------------------------------------------------


@pytest.mark.parametrize("event_type", ["", "Partition", "PARTITION", "dataset", "program_status", "time"])
def test_unknown_event_type_is_refused(event_type: str) -> None:
    assert "unknown event type" in refused(Notification(T0, event_type, {"datasetId": "sales.orders"}))


@pytest.mark.parametrize(
    "dataset",
    [
        "",
        "orders",
        ".orders",
        "sales.",
        "sa les.orders",
        "sales/x.orders",
        "n" * 129 + ".orders",
        "s." + "d" * 257,
    ],
)
def test_bad_dataset_id_is_refused(dataset: str) -> None:
    assert "datasetId" in refused(data(dataset, bytes="1"))
    assert "datasetId" in refused(partition(dataset))


def test_missing_dataset_id_is_refused() -> None:
    assert "datasetId" in refused(Notification(T0, "data", {"bytes": "1"}))


def test_dataset_id_may_have_dots_dashes_and_underscores_after_the_namespace() -> None:
    assert parse(data("my-ns_1.raw.orders-v2_x", bytes="1")).dataset == "my-ns_1.raw.orders-v2_x"  # type: ignore[union-attr]


def test_dataset_id_with_a_trailing_newline_is_refused() -> None:
    refused(data("sales.orders\n", bytes="1"))


@pytest.mark.parametrize(
    "keys", ["not json", "[1, 2", "", "{}", '{"a": 1}', '"2024-01-01"', "3", "null", "[]"]
)
def test_bad_or_empty_partition_keys_are_refused(keys: str) -> None:
    n = Notification(T0, "partition", {"datasetId": "sales.orders", "partitionKeys": keys})
    assert "partitionKeys" in refused(n)


def test_missing_partition_keys_are_refused() -> None:
    assert "partitionKeys" in refused(Notification(T0, "partition", {"datasetId": "sales.orders"}))


def test_deeply_nested_partition_keys_are_refused_as_invalid() -> None:
    depth = 20_000
    n = Notification(
        T0, "partition", {"datasetId": "sales.orders", "partitionKeys": "[" * depth + "]" * depth}
    )
    with pytest.raises(InvalidEvent):
        parse(n)


@pytest.mark.parametrize("size", ["", "abc", "12.5", "1e3", "0x10", "ten"])
def test_non_integer_bytes_are_refused(size: str) -> None:
    assert "bytes is not an integer" in refused(data(bytes=size))
    assert "bytes is not an integer" in refused(partition(bytes=size))


@pytest.mark.parametrize("size", ["-1", str(2**63)])
def test_bytes_out_of_range_are_refused(size: str) -> None:
    assert "bytes out of range" in refused(data(bytes=size))


def test_largest_long_bytes_are_accepted() -> None:
    assert parse(data(bytes=str(2**63 - 1))).bytes == 2**63 - 1  # type: ignore[union-attr]


@pytest.mark.parametrize("st", ["", "completed", "SUCCEEDED", "FINISHED", "DONE"])
def test_unknown_program_status_is_refused(st: str) -> None:
    assert "unknown program status" in refused(status(status=st))


def test_missing_status_is_refused() -> None:
    n = Notification(T0, "program-status", {"programId": ETL.id, "runId": "run-1"})
    assert "unknown program status" in refused(n)


def test_missing_run_id_is_refused() -> None:
    n = Notification(T0, "program-status", {"programId": ETL.id, "status": "RUNNING"})
    assert "runId" in refused(n)
    assert "runId" in refused(status(run_id=""))


def test_too_long_run_id_is_refused() -> None:
    assert "runId" in refused(status(run_id="r" * 257))
    assert parse(status(run_id="r" * 256)).run_id == "r" * 256  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "program",
    ["", "sales/etl/workflow", "sales/etl/workflow/daily/x", "sales//workflow/daily", "s/e/w/" + "n" * 129],
)
def test_bad_program_id_is_refused(program: str) -> None:
    assert "program id" in refused(status(program=program))


def test_missing_program_id_is_refused() -> None:
    refused(Notification(T0, "program-status", {"runId": "r", "status": "RUNNING"}))


def test_payload_with_too_many_entries_is_refused() -> None:
    payload = {f"k{i}": "v" for i in range(MAX_PAYLOAD_ENTRIES + 1)}
    payload["datasetId"] = "sales.orders"
    assert refused(Notification(T0, "data", payload)) == "payload too large"


def test_payload_of_too_many_characters_is_refused() -> None:
    n = data(bytes="1", note="x" * MAX_PAYLOAD_BYTES)
    assert refused(n) == "payload too large"


def test_payload_at_the_entry_limit_is_accepted() -> None:
    payload = {f"k{i}": "v" for i in range(MAX_PAYLOAD_ENTRIES - 1)}
    payload["datasetId"] = "sales.orders"
    assert parse(Notification(T0, "data", payload)) == DataEvent("sales.orders", 0, 0)


def test_payload_size_is_checked_before_the_event_type() -> None:
    n = Notification(T0, "nonsense", {"x": "y" * MAX_PAYLOAD_BYTES})
    assert refused(n) == "payload too large"


def test_invalid_event_is_a_value_error() -> None:
    assert issubclass(InvalidEvent, ValueError)


# --- dataset ids in schedules, notifications on the wire ------------------------------------------


def test_validate_dataset_names_the_given_field() -> None:
    validate_dataset("sales.orders")
    with pytest.raises(InvalidSchedule) as exc:
        validate_dataset("orders", "trigger.triggers.1.dataset")
    assert exc.value.field == "trigger.triggers.1.dataset"


def test_notification_round_trips_through_avro() -> None:
    n = partition(keys=["a", "b"], bytes="42")
    assert codec.decode_notification(codec.encode("Notification", codec.notification_to_avro(n))) == n


def test_undecodable_notification_bytes_raise_decode_error() -> None:
    with pytest.raises(codec.DecodeError):
        codec.decode_notification(b"\xff\xff\xff")
    with pytest.raises(codec.DecodeError):
        codec.decode_notification(None)
