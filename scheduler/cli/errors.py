"""What the CLI says when a command fails: one line naming what went wrong and what to check, and a
non-zero exit; never a traceback (SCHEDULER_DEBUG=1 shows it, for a bug report)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

#: exit codes: 1 the command failed (an API error, nothing reachable), 2 it was used wrongly, 130 interrupted
FAILED, USAGE, INTERRUPTED = 1, 2, 130


def one_line(exc: BaseException, args: Any = None) -> tuple[str, int]:
    """(the message, the exit code) of an exception a command raised."""
    import httpx
    from aiokafka.errors import KafkaConnectionError, KafkaError

    bootstrap = (
        getattr(args, "bootstrap", None) or os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or "127.0.0.1:9092"
    )
    url = getattr(args, "url", None) or os.environ.get("SCHEDULER_URL") or "http://127.0.0.1:6066"
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return f"not a usable URL: {url} ({exc}); --url or SCHEDULER_URL takes http(s)://host:port", USAGE
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return f"cannot reach the scheduler at {url} ({exc}); is a worker running there?", FAILED
    if isinstance(exc, httpx.TimeoutException):
        return (
            f"the scheduler at {url} did not answer in time ({type(exc).__name__}); --timeout waits longer",
            FAILED,
        )
    if isinstance(exc, httpx.HTTPError):
        return f"HTTP request to {url} failed: {type(exc).__name__}: {exc}", FAILED
    if isinstance(exc, KafkaConnectionError):
        return (
            f"cannot reach the Kafka brokers at {bootstrap} ({exc}); --bootstrap or KAFKA_BOOTSTRAP_SERVERS "
            "names them (`scheduler run --broker-port P` serves 127.0.0.1:P)",
            FAILED,
        )
    if isinstance(exc, KafkaError):
        return f"Kafka at {bootstrap}: {type(exc).__name__}: {exc}", FAILED
    from scheduler.cli.client import UsageError

    if isinstance(exc, UsageError):  # (a command outside the HTTP client's: `import`)
        return f"{exc}", USAGE
    if isinstance(exc, FileNotFoundError):
        return f"{exc.filename or exc}: no such file", USAGE
    if isinstance(exc, IsADirectoryError | PermissionError):
        return f"{exc.filename or exc}: {exc.strerror or exc}", USAGE
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text: {exc}", USAGE
    if isinstance(exc, ValueError | TypeError | KeyError):
        return f"{exc}", USAGE
    return f"{type(exc).__name__}: {exc}", FAILED


def guarded(func: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`func(args)` whose failure is one line on stderr and an exit code instead of a traceback."""

    def run(args: Any) -> Any:
        try:
            return func(args)
        except KeyboardInterrupt:
            print("scheduler: interrupted", file=sys.stderr)
            return INTERRUPTED
        except Exception as exc:
            if os.environ.get("SCHEDULER_DEBUG"):
                raise
            message, code = one_line(exc, args)
            print(f"scheduler: error: {message}", file=sys.stderr)
            return code

    return run
