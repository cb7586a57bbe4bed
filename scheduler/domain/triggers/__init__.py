"""Time triggers: when a schedule is due. Pure and synchronous; no Kafka here."""

from scheduler.domain.triggers.base import TimeTrigger
from scheduler.domain.triggers.catchup import CatchUpPlan, plan_catch_up

__all__ = ["CatchUpPlan", "TimeTrigger", "plan_catch_up"]
