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


__all__ = ["JsonFormatter", "basic_config", "logging_config", "worker_options"]
