"""HTTP/CLI edge models (pydantic v2): request bodies in, JSON out. Field names are the Avro names."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scheduler.model import (
    MAX_FREQUENCY_TIME,
    CatchUpPolicy,
    CronTrigger,
    FrequencyTrigger,
    Schedule,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
)

_LONG_MAX = 2**63 - 1


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CronTriggerIn(_In):
    type: Literal["cron"]
    expression: str
    timezone: str = "UTC"


class FrequencyTriggerIn(_In):
    type: Literal["frequency"]
    timeUnit: TimeUnit
    time: int = Field(ge=1, le=MAX_FREQUENCY_TIME)
    start: int | None = Field(None, ge=0, le=_LONG_MAX, description="epoch milliseconds")


TriggerIn = Annotated[CronTriggerIn | FrequencyTriggerIn, Field(discriminator="type")]


class ScheduleBody(_In):
    """Body of PUT /schedules/{tenant}/{name}: the key comes from the path."""

    trigger: TriggerIn
    topic: str
    data: dict[str, str] = Field(default_factory=dict)
    enabled: bool = False
    catchUp: CatchUpPolicy = CatchUpPolicy.COALESCE
    catchUpWindowMs: int = Field(3_600_000, ge=0, le=_LONG_MAX)

    def to_schedule(self, key: ScheduleKey) -> Schedule:
        t = self.trigger
        trigger: CronTrigger | FrequencyTrigger
        if isinstance(t, CronTriggerIn):
            trigger = CronTrigger(t.expression, t.timezone)
        else:
            trigger = FrequencyTrigger(t.timeUnit, t.time, t.start)
        return Schedule(
            key=key,
            trigger=trigger,
            topic=self.topic,
            data=dict(self.data),
            enabled=self.enabled,
            catch_up=self.catchUp,
            catch_up_window_ms=self.catchUpWindowMs,
        )


class ScheduleIn(ScheduleBody):
    """Body of POST /schedules."""

    tenant: str
    name: str

    def key(self) -> ScheduleKey:
        return ScheduleKey(self.tenant, self.name)


class TaskFrequencyIn(_In):
    timeUnit: TimeUnit
    time: int = Field(ge=1, le=MAX_FREQUENCY_TIME)


class TaskDefinitionIn(_In):
    """light-scheduler's TaskDefinition as JSON (POST /schedulers)."""

    host: str
    name: str
    action: Literal["INSERT", "UPDATE", "DELETE"]
    frequency: TaskFrequencyIn | None = None
    topic: str
    start: int | None = Field(None, ge=0, le=_LONG_MAX)
    data: dict[str, str] | None = None

    def to_record(self) -> dict[str, Any]:
        rec = self.model_dump()
        if self.frequency is not None:
            rec["frequency"] = {"timeUnit": self.frequency.timeUnit.value, "time": self.frequency.time}
        return rec


def validation_errors(exc: ValidationError) -> list[dict[str, str]]:
    return [{"field": _field_name(err["loc"]), "message": err["msg"]} for err in exc.errors()]


def _field_name(loc: tuple[int | str, ...]) -> str:
    """Dotted field name; pydantic puts the union tag after "trigger" ("trigger.cron.expression")."""
    parts = [
        str(p) for i, p in enumerate(loc) if not (i > 0 and loc[i - 1] == "trigger" and p in _TRIGGER_TAGS)
    ]
    return ".".join(parts) or "body"


_TRIGGER_TAGS = ("cron", "frequency")


def trigger_json(s: Schedule) -> dict[str, Any]:
    t = s.trigger
    if isinstance(t, CronTrigger):
        return {"type": "cron", "expression": t.expression, "timezone": t.timezone}
    return {"type": "frequency", "timeUnit": t.unit.value, "time": t.time, "start": t.start_ms}


def schedule_json(state: ScheduleState, next_fire_at: int | None) -> dict[str, Any]:
    s = state.schedule
    return {
        "key": s.key.id,
        "tenant": s.key.tenant,
        "name": s.key.name,
        "trigger": trigger_json(s),
        "topic": s.topic,
        "data": s.data,
        "enabled": s.enabled,
        "catchUp": s.catch_up.value,
        "catchUpWindowMs": s.catch_up_window_ms,
        "createdAt": state.created_at,
        "updatedAt": state.updated_at,
        "activeSince": state.active_since,
        "version": state.version,
        "nextFireAt": next_fire_at,
    }


def state_from_json(d: dict[str, Any]) -> ScheduleState:
    """Inverse of schedule_json (how one worker reads what another answered)."""
    body = ScheduleIn.model_validate(
        {
            k: d[k]
            for k in ("tenant", "name", "trigger", "topic", "data", "enabled", "catchUp", "catchUpWindowMs")
        }
    )
    return ScheduleState(
        body.to_schedule(body.key()), d["createdAt"], d["updatedAt"], d["activeSince"], d["version"]
    )
