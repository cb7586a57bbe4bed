"""The scheduler's Python client library, for producers and operators:

- `CommandProducer`: schedule commands (insert, update, delete, enable, disable; many at once) straight
  onto the commands topic, and events onto the events topic — Avro, keyed and partitioned as the workers
  partition them;
- `HttpClient`: the HTTP API (what the `scheduler` CLI uses): schedules, jobs, runs, events, with auth
  and retries;
- `RecordReader`: fires, launch requests, dead letters and alerts read back (read_committed on Kafka);
- `scheduler.client.code`: the `@schedule`, `@on_partitions` and `@after` decorators that declare a module's
  functions as programs with their schedules, for `scheduler apply --module`;
- `scheduler.client.importers`: a crontab and CronJob manifests as files `scheduler apply` takes.

The docs site's Client library page (docs/content/reference/client.md) has examples.
"""

from scheduler.client.http import ApiError, HttpClient
from scheduler.client.kafka import CommandProducer, Record, RecordReader

__all__ = ["ApiError", "CommandProducer", "HttpClient", "Record", "RecordReader"]
