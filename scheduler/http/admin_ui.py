"""The admin web page (GET /ui): schedules, next fires, pending jobs, recent runs.

The page is three static files (scheduler/http/static/) served as they are: it carries no data, so it is
public; its script reads the JSON API with the user's token and renders with text nodes only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from faust.web import Request, Response, View

if TYPE_CHECKING:
    from scheduler.worker.ports import WebPort

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")
PAGE = "admin.html"
CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
# A second line of defence behind the text-only rendering: no inline script or style, no other origin.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _assets() -> dict[str, tuple[str, str]]:
    """{file name: (content, content type)} of the page's files, read once (they ship with the package)."""
    if not STATIC.is_dir():  # an install without the package data: no page, but the worker still runs
        log.warning("admin page files not found in %s: GET /ui answers 404", STATIC)
        return {}
    return {
        path.name: (path.read_text("utf-8"), CONTENT_TYPES[path.suffix])
        for path in sorted(STATIC.iterdir())
        if path.suffix in CONTENT_TYPES
    }


def register_routes(worker: WebPort) -> None:
    """Add this module's routes to the worker's web app (called by scheduler.http.web.register_views)."""
    app = worker.faust_app
    assets = _assets()

    def serve(view: View, name: str) -> Response:
        if name not in assets:
            return view.json({"error": "not found"}, status=404)
        content, content_type = assets[name]
        return view.text(content, content_type=content_type, headers=dict(HEADERS))  # utf-8

    @app.page("/ui")
    class AdminPage(View):
        async def get(self, request: Request) -> Response:
            return serve(self, PAGE)

    @app.page("/ui/{asset:[^/]*}")
    class AdminAsset(View):
        async def get(self, request: Request, asset: str) -> Response:
            return serve(self, asset or PAGE)
