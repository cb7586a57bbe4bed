"""The punctuator's prebuilt FiredTask encoder writes exactly what the Avro codec writes."""

from __future__ import annotations

import pytest

from scheduler.codec import decode_fired, encode_fired, fired_task_encoder
from scheduler.model import FiredTask, ScheduleKey, job_id

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("data", [{}, {"a": "b"}, {"ü": "✓" * 70, "empty": "", "k" * 200: "v"}])
@pytest.mark.parametrize("due", [0, 1, 63, 64, 1_795_306_941_000, 2**40, -5])
def test_fired_task_encoder_is_byte_identical_to_the_codec(data: dict[str, str], due: int) -> None:
    key = ScheduleKey("acmé", "nightly report")
    encode = fired_task_encoder(key, data)
    for fired_at, missed, catch_up in [(due, 0, False), (due + 123, 3, True), (due + 1, 100_000, False)]:
        value = encode(due, fired_at, missed, catch_up)
        assert value == encode_fired(FiredTask(key, job_id(key, due), due, fired_at, data, missed, catch_up))
        assert decode_fired(value).job_id == f"acmé/nightly report@{due}"
