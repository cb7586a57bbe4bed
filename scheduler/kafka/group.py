"""The app's consumer group membership, as Faust's consumer holds it (private members: here only), and the
member a crashed process left in its groups.

A consumer killed (SIGKILL, OOM, a node lost) stays a member of its group until its session times out: a
rebalance waits for every member, so a worker restarted at once would wait that long (10 s) for its own
partitions back. Each member id this process holds is written to its data dir (PreviousMembers); a process
started on that data dir first asks each group's coordinator to remove the member it had (LeaveGroup, as
a clean stop sends), so the group rebalances at once without it. Member ids are unique per join
(`<client id>-<uuid>`): an id of a member gone already is refused as unknown, and nothing else is touched.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: where a data dir keeps the member ids its process held, one file per consumer group
MEMBERS_DIR = "group-members"


def _app_consumer(app: Any) -> tuple[Any, Any]:
    """Faust's aiokafka consumer and the loop of the thread it runs in (None, None before it started)."""
    thread = getattr(app.consumer, "_thread", None)
    return getattr(thread, "_consumer", None), getattr(thread, "thread_loop", None)


def member_of(consumer: Any) -> tuple[str, str] | None:
    """(group id, member id) of an aiokafka consumer that joined its group; None before it has."""
    coordinator = getattr(consumer, "_coordinator", None)
    group = getattr(coordinator, "group_id", None)
    member = getattr(coordinator, "member_id", "")
    return (group, member) if group and member else None


def app_member(app: Any) -> tuple[str, str] | None:
    """(group id, member id) of the app's consumer (Faust's), once it joined."""
    return member_of(_app_consumer(app)[0])


class PreviousMembers:
    """The member id this data dir's process last held in each consumer group (a small file per group)."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir / MEMBERS_DIR
        self._written: dict[str, str] = {}

    def remember(self, member: tuple[str, str] | None) -> None:
        """Write (group, member id) down, once per new member id (after each join that changed it)."""
        if member is None or self._written.get(member[0]) == member[1]:
            return
        group, member_id = member
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            path = self.dir / f"{group}.json"
            partial = path.with_suffix(".json.partial")
            partial.write_text(json.dumps({"group": group, "memberId": member_id}))
            os.replace(partial, path)
        except OSError as exc:  # (best effort: a restart then waits out the session, as without it)
            log.warning("could not write down group member %s of %s: %s", member_id, group, exc)
            return
        self._written[group] = member_id

    def recorded(self, groups: list[str]) -> dict[str, str]:
        """group -> the member id last written down for it (for those of `groups` that have one)."""
        out: dict[str, str] = {}
        for group in groups:
            try:
                record = json.loads((self.dir / f"{group}.json").read_text())
                out[group] = str(record["memberId"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out


async def leave_for(bootstrap_servers: str, members: dict[str, str], timeout_s: float) -> dict[str, str]:
    """Ask each group's coordinator to remove a member (LeaveGroup): group -> what it answered ("left",
    "gone already", or why it could not be asked)."""
    from aiokafka import AIOKafkaClient
    from aiokafka.errors import KafkaError, UnknownMemberIdError, for_code
    from aiokafka.protocol.group import LeaveGroupRequest

    outcomes: dict[str, str] = {}
    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=int(timeout_s * 1000))
    try:
        await asyncio.wait_for(client.bootstrap(), timeout_s)
        for group, member_id in members.items():
            try:
                node = await asyncio.wait_for(client.coordinator_lookup(0, group), timeout_s)  # 0: a group
                answer = await asyncio.wait_for(
                    client.send(node, LeaveGroupRequest(group, member_id)), timeout_s
                )
                error = for_code(answer.error_code)
                if error is UnknownMemberIdError:
                    outcomes[group] = "gone already"
                elif answer.error_code == 0:
                    outcomes[group] = "left"
                else:
                    outcomes[group] = f"refused: {error.__name__}"
            except (TimeoutError, KafkaError, OSError) as exc:
                outcomes[group] = f"not asked: {exc!r}"
    except (TimeoutError, KafkaError, OSError) as exc:
        outcomes = {group: f"not asked: {exc!r}" for group in members}
    finally:
        await client.close()
    return outcomes


def leave_previous_members(
    bootstrap_servers: str,
    data_dir: Path,
    groups: list[str],
    timeout_s: float = 5.0,
    say: Callable[[str], None] = log.info,
) -> dict[str, str]:
    """Before this process joins `groups`: remove from each the member its data dir's previous process held
    (see the module's doc). Blocking, in a thread of its own with its own event loop (the caller's loop,
    if any, is not touched); never raises."""
    members = PreviousMembers(data_dir).recorded(groups)
    if not members:
        return {}
    outcomes: dict[str, str] = {}

    def run() -> None:
        try:
            outcomes.update(asyncio.run(leave_for(bootstrap_servers, members, timeout_s)))
        except Exception as exc:  # (never stops a start: the group then waits out the old session)
            outcomes.update({group: f"not asked: {exc!r}" for group in members})

    thread = threading.Thread(target=run, name="leave-previous-members", daemon=True)
    thread.start()
    thread.join(timeout_s * 3)
    for group, member_id in members.items():
        say(f"the member this data dir held in {group} ({member_id}): {outcomes.get(group, 'no answer')}")
    return outcomes


def request_rejoin(app: Any) -> bool:
    """Ask the group coordinator for a rebalance (Faust's consumer runs in a thread of its own: the
    request is handed to that thread's loop). True if it could be asked."""
    consumer, loop = _app_consumer(app)
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or loop is None:
        log.warning("could not ask for a rebalance: the consumer is not started")
        return False
    loop.call_soon_threadsafe(coordinator.request_rejoin)
    return True


def track_recovery_generation() -> None:
    """Process-wide: Faust's Recovery remembers the consumer generation of the recovery that is completing.

    A worker that wakes from a pause in the middle of a rebalance sees its earlier recovery complete after
    the next assignment was made: Faust calls the tables' recovery callbacks first, and only then notices the
    generation moved on. The worker must not take that for the new assignment's recovery (its tables are not
    restored yet: it would fire from empty ones). See recovery_is_current."""
    from faust.tables.recovery import Recovery

    original = Recovery.on_recovery_completed
    if getattr(original, "_tracks_generation", False):
        return

    async def on_recovery_completed(self: Any, generation_id: int = 0) -> None:
        self.completing_generation = generation_id
        await original(self, generation_id)

    on_recovery_completed._tracks_generation = True  # type: ignore[attr-defined]
    Recovery.on_recovery_completed = on_recovery_completed  # type: ignore[method-assign]


def recovery_is_current(app: Any) -> bool:
    """Whether the recovery whose completion is being handled is of the consumer's current generation."""
    completing = getattr(app.tables.recovery, "completing_generation", None)
    return completing is None or completing == app.consumer_generation_id


def membership_progress(app: Any) -> int:
    """A number that moves whenever the app's group membership makes progress towards serving an assignment:
    a rebalance begun, or a changelog record restored (active or standby). See liveness.Membership."""
    recovery = app.tables.recovery
    restored = sum(recovery.active_offsets.values()) + sum(recovery.standby_offsets.values())
    return hash((int(getattr(app, "rebalancing_count", 0)), int(restored)))
