"""The domain's primitives: time units, the validation error, program and dataset ids. Every other domain
module may import this one; it imports nothing of the package (so triggers, constraints, events and the
records do not import each other in a circle)."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum


def plural(n: int, one: str, many: str = "") -> str:
    """`n` and the word that goes with it: "1 run", "2 runs", "1,000 entries" (`many`: when not one + s)."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


class TimeUnit(StrEnum):
    MILLISECONDS = "MILLISECONDS"
    SECONDS = "SECONDS"
    MINUTES = "MINUTES"
    HOURS = "HOURS"
    DAYS = "DAYS"

    @property
    def ms(self) -> int:
        return _UNIT_MS[self]


_UNIT_MS = {
    TimeUnit.MILLISECONDS: 1,
    TimeUnit.SECONDS: 1_000,
    TimeUnit.MINUTES: 60_000,
    TimeUnit.HOURS: 3_600_000,
    TimeUnit.DAYS: 86_400_000,
}


#: the longest span any setting takes (catch-up window, elapsed trigger, delay, last run, pending timeout)
MAX_SPAN_MS = 7 * 86_400_000
#: the latest instant a schedule may name (notBefore, notAfter, a once trigger's `at`, a frequency's start)
MAX_INSTANT_MS = 7_258_118_400_000  # 2200-01-01

#: the concurrency group names validation takes, defined once (the HTTP models and OpenAPI use it too)
GROUP_PATTERN = r"[A-Za-z0-9._-]{1,128}"


class CatchUpPolicy(StrEnum):
    COALESCE = "COALESCE"
    EACH = "EACH"
    SKIP = "SKIP"


class InvalidSchedule(ValueError):
    """A schedule or command that must not be applied; `field` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def clean_text(value: str) -> bool:
    """No C0/C1 control characters, line or paragraph separators, nor lone surrogates (which cannot be
    encoded as UTF-8: they arrive through JSON's \\udXXX escapes). Other Unicode is welcome."""
    return (value.isascii() and value.isprintable()) or not any(
        unicodedata.category(c) in _UNCLEAN_CATEGORIES for c in value
    )


_UNCLEAN_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})


@dataclass(frozen=True, slots=True)
class ProgramId:
    """A program the scheduler launches (CDAP's namespace/application/type/name)."""

    namespace: str
    application: str
    type: str
    name: str

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.application}/{self.type}/{self.name}"

    @classmethod
    def parse(cls, program_id: str) -> ProgramId:
        parts = program_id.split("/")
        if len(parts) != 4 or not all(parts) or any(len(p) > 128 or not clean_text(p) for p in parts):
            raise InvalidSchedule(
                "program", f"program id {program_id!r} is not 'namespace/application/type/name'"
            )
        return cls(*parts)


class OutputFormat(StrEnum):
    """What a schedule without a program sends to its topic on each fire."""

    FIRED_TASK = "FIRED_TASK"  # ours (FiredTask.avsc)
    TASK_DEFINITION = "TASK_DEFINITION"  # light-scheduler's: its TaskDefinition with start = the fire time


class ProgramOutcome(StrEnum):
    """What a program-status trigger waits for; FINISHED is any end (COMPLETED, FAILED, STOPPED, KILLED)."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    FINISHED = "FINISHED"
    STOPPED = "STOPPED"

    def matches(self, status: str) -> bool:
        return _OUTCOME_STATUSES[self].__contains__(status)

    @classmethod
    def _missing_(cls, value: object) -> ProgramOutcome | None:
        """SUCCESSFUL, as seed 002 (CDAP's TriggerableProgramStatus) writes it, is SUCCEEDED."""
        return cls.SUCCEEDED if value == "SUCCESSFUL" else None


_OUTCOME_STATUSES = {
    ProgramOutcome.SUCCEEDED: frozenset({"COMPLETED"}),
    ProgramOutcome.FAILED: frozenset({"FAILED"}),
    ProgramOutcome.KILLED: frozenset({"KILLED"}),
    ProgramOutcome.STOPPED: frozenset({"STOPPED"}),
    ProgramOutcome.FINISHED: frozenset({"COMPLETED", "FAILED", "STOPPED", "KILLED"}),
}

# namespace.name; the name may hold dots but not start with one, nor hold ".." (datasets are paths too)
DATASET_RE = re.compile(r"[A-Za-z0-9_-]{1,128}\.(?!.*\.\.)[A-Za-z0-9_-][A-Za-z0-9_.-]{0,255}", re.ASCII)


def validate_dataset(dataset: str, field_name: str = "dataset") -> None:
    if not DATASET_RE.fullmatch(dataset):
        raise InvalidSchedule(field_name, f"dataset id {dataset!r} is not '<namespace>.<dataset>'")


def dataset_tenant(dataset: str) -> str:
    """'<namespace>.<dataset>' -> namespace."""
    return dataset.split(".", 1)[0]
