"""Log format of the worker and the CLI: SCHEDULER_LOG_FORMAT=text (default) or json.

json: one JSON object per line — ts (UTC, ISO 8601 with ms), level, logger, message, then the record's
extra fields (`log.info("...", extra={"partition": 3})`) and exc_info (the formatted traceback). Faust's
Worker configures logging itself when it starts, so the worker hands it `worker_options()`; everything the
worker prints to stdout/stderr meanwhile is redirected into logging by Faust, so it is JSON too.
"""

from __future__ import annotations

import json
import logging
import logging.config
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: attributes every LogRecord has: anything else on a record came from `extra=`
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key not in out:
                out[key] = value
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def logging_config(log_format: LogFormat, level: str | int) -> dict[str, Any] | None:
    """A logging.config.dictConfig for the format (None for text: Faust's own, colours and all)."""
    if log_format != "json":
        return None
    level = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        # stderr as it is now: Faust later replaces sys.stdout/sys.stderr with proxies into logging
        "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "json", "level": level}},
        "root": {"level": level, "handlers": ["default"]},
    }


def worker_options(log_format: LogFormat, level: str) -> dict[str, Any]:
    """Keyword arguments for faust.Worker: its logging setup in this format."""
    config = logging_config(log_format, level)
    if config is None:
        return {"loglevel": level}
    logging.captureWarnings(True)  # warnings.warn goes through logging too
    # quiet: no bare " OK ^" line on stdout when it starts
    return {"loglevel": level, "logging_config": config, "quiet": True}


def basic_config(log_format: str, level: int = logging.INFO) -> None:
    """For the CLI commands (and the worker until Faust configures logging)."""
    config = logging_config("json" if log_format == "json" else "text", level)
    if config is None:
        logging.basicConfig(level=level, format=TEXT_FORMAT)
    else:
        logging.config.dictConfig(config)


#: what aiokafka logs at ERROR and retries itself (a partition whose leader moves, a topic being created,
#: a broker restarting, a group coordinator not elected yet, a session lost to a pause), and what the
#: worker's own loops log each time they retry: by the record's format string
TRANSIENT = {
    "aiokafka.client": (
        'Unable connect to "%s:%s": %s',
        "Unable to update metadata from %s",
        "Unable connect to node with id %s: %s",
    ),
    "aiokafka.cluster": (
        "Topic %s not found in cluster metadata",
        "Error fetching metadata for topic %s: %s",
    ),
    "aiokafka.consumer.fetcher": (
        "Failed fetch messages from %s: %s",
        "Failed fetch offsets from %s: %s",
    ),
    "aiokafka.consumer.group_coordinator": (
        "Error sending %s to node %s [%s] -- marking coordinator dead",
        "Group Coordinator Request failed: %s",
        "Heartbeat send request failed: %s. Will retry.",
        "Heartbeat session expired - marking coordinator dead",
        "Heartbeat failed: %r",
        "OffsetCommit failed before join, ignoring: %s",
    ),
    "aiokafka.producer.sender": ("FindCoordinator Request failed: %s",),
    "scheduler.worker.ingest": (
        "commands fetch failed; retrying",
        "schedule changelog write of partition %d failed (%r); retrying in 1 s",
    ),
}
TRANSIENT_WINDOW_S = 60.0


class TransientErrors(logging.Filter):
    """ERROR is for what needs a human. What a client retries by itself is logged at WARNING here, and
    at most once per kind (logger and format string) every `window_s`, the next line saying how many
    more there were: a healthy start on a 3-node cluster logged 10-16 ERROR lines, a broker restart
    hundreds, and operators learned to ignore ERROR."""

    def __init__(self, window_s: float = TRANSIENT_WINDOW_S, clock: Any = None) -> None:
        super().__init__()
        import time

        self.window_s = window_s
        self.clock = clock or time.monotonic
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}  # kind -> (its last line, held since)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in TRANSIENT.get(record.name, ()):
            return True
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        kind, now = (record.name, str(record.msg)), self.clock()
        last, held = self._seen.get(kind, (None, 0))
        if last is not None and now - last < self.window_s:
            self._seen[kind] = (last, held + 1)
            return False
        self._seen[kind] = (now, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like it in the last {now - last:.0f} s)"  # type: ignore[operator]
        return True


def quiet_transients(window_s: float = TRANSIENT_WINDOW_S) -> TransientErrors:
    """Put a TransientErrors filter on each logger that logs transients (idempotent)."""
    for name in TRANSIENT:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, TransientErrors)]:
            logger.removeFilter(old)
    quiet = TransientErrors(window_s)
    for name in TRANSIENT:
        logging.getLogger(name).addFilter(quiet)
    return quiet


__all__ = [
    "JsonFormatter",
    "TransientErrors",
    "basic_config",
    "logging_config",
    "quiet_transients",
    "worker_options",
]
