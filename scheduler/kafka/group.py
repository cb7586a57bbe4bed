"""The app's consumer group membership, as Faust's consumer holds it (private members: here only), and the
members a crashed process left in its groups.

A consumer killed (SIGKILL, OOM, a node lost) stays a member of its group until its session times out: a
rebalance waits for every member, so a worker restarted at once would wait that long (10 s) for its own
partitions back. Each member id a process holds is written in its data dir, in a slot file it keeps locked
(flock) for its life (PreviousMembers). A process started on that data dir claims a free slot: a slot
nobody holds belongs to a process that is gone, so it asks the group's coordinator to remove the member
written there (LeaveGroup, as a clean stop sends) and the group rebalances at once without it. A slot held
is a live process's (two workers may share a data dir): its member is never touched. Member ids are unique
per join (`<client id>-<uuid>`): one that left already is refused as unknown, and nothing else changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: where a data dir keeps the member ids its processes hold: `<group>.<slot>.json`, each locked by its holder
MEMBERS_DIR = "group-members"
MAX_SLOTS = 64  # processes sharing one data dir, per group

# (members dir, group) -> the descriptor of the slot file this process holds (locked until it exits)
_held: dict[tuple[Path, str], int] = {}
_held_lock = threading.Lock()


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


def _read_member(fd: int) -> str | None:
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        raw = os.pread(fd, 4096, 0)
        return str(json.loads(raw)["memberId"]) if raw else None
    return None


def _try_lock(path: Path) -> int | None:
    """The slot file opened and locked, or None if a live process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


class PreviousMembers:
    """The member ids this data dir's processes hold in their consumer groups (see the module's doc)."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir / MEMBERS_DIR
        self._written: dict[str, str] = {}

    def claim(self, group: str) -> list[str]:
        """Hold a slot of `group` for this process (once); the member ids written in the slots no process
        holds (theirs are gone), which are cleared."""
        with _held_lock:
            if (self.dir, group) in _held:
                return []
            self.dir.mkdir(parents=True, exist_ok=True)
            gone: list[str] = []
            mine: int | None = None
            for slot in range(MAX_SLOTS):
                path = self.dir / f"{group}.{slot}.json"
                if mine is not None and not path.exists():
                    break
                fd = _try_lock(path)
                if fd is None:
                    continue  # a live process's
                if (member := _read_member(fd)) is not None:
                    gone.append(member)
                    os.ftruncate(fd, 0)
                if mine is None:
                    mine = fd
                else:
                    os.close(fd)  # (unlocks it: a free slot)
            if mine is None:
                raise OSError(f"all {MAX_SLOTS} slots of {group} in {self.dir} are held")
            _held[(self.dir, group)] = mine
            return gone

    def remember(self, member: tuple[str, str] | None) -> None:
        """Write (group, member id) in this process's slot, once per new member id (after each join that
        changed it)."""
        if member is None or self._written.get(member[0]) == member[1]:
            return
        group, member_id = member
        try:
            self.claim(group)
            fd = _held[(self.dir, group)]
            raw = json.dumps({"group": group, "memberId": member_id, "pid": os.getpid()}).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, raw, 0)
        except OSError as exc:  # (best effort: a restart then waits out the session, as without it)
            log.warning("could not write down group member %s of %s: %s", member_id, group, exc)
            return
        self._written[group] = member_id


def release_claims() -> None:
    """Let go of every slot this process holds (as its exit does; for tests)."""
    with _held_lock:
        for fd in _held.values():
            os.close(fd)
        _held.clear()


async def leave_for(
    bootstrap_servers: str, members: list[tuple[str, str]], timeout_s: float
) -> dict[str, str]:
    """Ask each (group, member id)'s coordinator to remove that member (LeaveGroup): member id -> what it
    answered ("left", "gone already", or why it could not be asked)."""
    from aiokafka import AIOKafkaClient
    from aiokafka.errors import KafkaError, UnknownMemberIdError, for_code
    from aiokafka.protocol.group import LeaveGroupRequest

    outcomes: dict[str, str] = {}
    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=int(timeout_s * 1000))
    try:
        await asyncio.wait_for(client.bootstrap(), timeout_s)
        for group, member_id in members:
            try:
                node = await asyncio.wait_for(client.coordinator_lookup(0, group), timeout_s)  # 0: a group
                answer = await asyncio.wait_for(
                    client.send(node, LeaveGroupRequest(group, member_id)), timeout_s
                )
                error = for_code(answer.error_code)
                if error is UnknownMemberIdError:
                    outcomes[member_id] = "gone already"
                elif answer.error_code == 0:
                    outcomes[member_id] = "left"
                else:
                    outcomes[member_id] = f"refused: {error.__name__}"
            except (TimeoutError, KafkaError, OSError) as exc:
                outcomes[member_id] = f"not asked: {exc!r}"
    except (TimeoutError, KafkaError, OSError) as exc:
        outcomes = {member_id: f"not asked: {exc!r}" for _, member_id in members}
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
    """Before this process joins `groups`: claim a slot of each, and remove from each group the members of
    the processes gone from this data dir (see the module's doc): member id -> outcome. Blocking, in a
    thread of its own with its own event loop (the caller's loop, if any, is not touched); never raises."""
    members: list[tuple[str, str]] = []
    slots = PreviousMembers(data_dir)
    for group in groups:
        try:
            members += [(group, member_id) for member_id in slots.claim(group)]
        except OSError as exc:
            say(f"no slot for the member of {group} in {slots.dir}: {exc}")
    if not members:
        return {}
    outcomes: dict[str, str] = {}

    def run() -> None:
        try:
            outcomes.update(asyncio.run(leave_for(bootstrap_servers, members, timeout_s)))
        except Exception as exc:  # (never stops a start: the group then waits out the old session)
            outcomes.update({member_id: f"not asked: {exc!r}" for _, member_id in members})

    thread = threading.Thread(target=run, name="leave-previous-members", daemon=True)
    thread.start()
    thread.join(timeout_s * 3)
    for group, member_id in members:
        say(f"the member a process gone from this data dir held in {group} ({member_id}): "
            f"{outcomes.get(member_id, 'no answer')}")  # fmt: skip
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
