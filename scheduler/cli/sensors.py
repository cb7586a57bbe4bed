"""`scheduler sensors list|status`: polling sensors and their state (HTTP API)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scheduler.cli.render import print_answer

if TYPE_CHECKING:
    from scheduler.client.http import HttpClient


def _sensor_text(s: dict[str, Any]) -> str:
    from scheduler.cli.render import iso

    lines = [
        f"{s['sensor']}: {s['outcome']} (every {s['intervalMs'] / 1000:g} s; last {iso(s['evaluatedAt'])}, "
        f"next {iso(s['nextAt'])})",
        f"  {s['evaluations']} evaluations, {s['fires']} fires, {s['failures']} failures; cursor {s['cursor']!r}",
    ]
    if s["runKeys"]:
        lines.append(f"  last fire: {', '.join(s['runKeys'][:10])}{' …' if len(s['runKeys']) > 10 else ''}")
    if s["reason"]:
        lines.append(f"  reason: {s['reason'][-300:]}")
    return "\n".join(lines)


async def cmd_sensors_list(client: HttpClient, args: argparse.Namespace) -> None:
    answer = await client.request("GET", "/sensors", params={"namespace": args.namespace})
    sensors = answer["sensors"]
    print_answer(args, answer, "\n".join(map(_sensor_text, sensors)) if sensors else "no sensors")


async def cmd_sensors_status(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_program

    answer = await client.request("GET", f"/programs/{parse_program(args.program)}/sensor")
    print_answer(args, answer, _sensor_text(answer))


def register(sub: Any, leaf: Callable[..., argparse.ArgumentParser]) -> None:
    sensors = sub.add_parser("sensors", help="polling sensors and their state (HTTP API)")
    group = sensors.add_subparsers(dest="subcommand", required=True)
    p = leaf(group, "list", cmd_sensors_list, "every sensor with its cursor and last evaluation")
    p.add_argument("--namespace", help="only this namespace's sensors")
    p = leaf(group, "status", cmd_sensors_status, "one sensor: its cursor, last evaluation, next one")
    p.add_argument(
        "program", metavar="PROGRAM", help="the sensor's program id: namespace/application/type/name"
    )
