"""The OpenAPI document of the HTTP API (GET /openapi.json)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.app import Worker


def register_routes(worker: Worker) -> None:
    """Add this module's routes to the worker's web app (called by scheduler.web.register_views)."""
