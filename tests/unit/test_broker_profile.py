"""The embedded broker's profile: which fetches count as a table restore (they may wait longer), and the
Faust settings each broker gets."""

from __future__ import annotations

import pytest

from scheduler.config import TANSU_RESTORE_LAG, broker_profile, recovery_fetch

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("lags", "expected"),
    [
        ({"app-schedules-changelog": 12_000, "app-commands": 0}, True),  # a restore: far behind
        ({"app-schedules-changelog": 3, "app-commands": 0}, False),  # at the tail: the short poll
        ({"app-schedules-changelog": None, "app-commands": 0}, False),  # not known before a first fetch
        ({"app-commands": 50_000}, False),  # an agent's backlog is not a restore
        ({"app-schedules-changelog": TANSU_RESTORE_LAG}, False),
        ({"app-schedules-changelog": TANSU_RESTORE_LAG + 1}, True),
        ({}, False),
    ],
)
def test_a_fetch_is_a_restore_while_a_changelog_is_far_behind(
    lags: dict[str, int | None], expected: bool
) -> None:
    assert recovery_fetch(lags) is expected


def test_changelogs_keep_the_producers_batching_on_every_broker() -> None:
    for profile in ("tansu", "kafka"):
        assert "producer_max_batch_size" not in broker_profile(profile)
    assert broker_profile("tansu")["broker_session_timeout"] <= 10
