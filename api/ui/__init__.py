"""Owns the web UI's HTTP side: ``/ui`` (the page shell) and ``/ui/static/*`` (ES modules, CSS).

The UI is plain ES modules and hand-written SVG shipped as package data in ``api/ui/static`` (no
build step, no CDN, nothing fetched from the internet). Every page reads the public ``/v1`` API
with the project key the user enters once (kept in the tab's sessionStorage), so it sees exactly
what that key may see. Responses carry a Content-Security-Policy that allows only this origin, and
``Referrer-Policy: no-referrer``. ``/favicon.ico`` answers the UI's icon (``static/favicon.svg``),
so no tab logs a 404 for it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

STATIC = Path(str(resources.files("api.ui") / "static")).resolve()
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml"}
_HEADERS = {
    "Content-Security-Policy": CSP,
    "Referrer-Policy": "no-referrer",  # page URLs name runs, trees and samples: never send them on
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get("/ui")
async def ui_root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307, headers=_HEADERS)


@router.get("/ui/")
async def ui_index() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=_HEADERS)


def _assets() -> dict[str, Path]:
    """Every servable file under STATIC by its relative name (``pages/runs.js``), listed once: a
    request names one of these or gets a 404, and no client text ever reaches the file system (a
    name too long for it, a NUL, ``..``)."""
    return {
        path.relative_to(STATIC).as_posix(): path
        for path in sorted(STATIC.rglob("*"))
        if path.suffix in _TYPES and path.is_file()
    }


_ASSETS = _assets()


@router.get("/favicon.ico")
async def favicon() -> FileResponse:
    """The UI's icon where a browser looks for one by itself (a tab on /docs, a JSON route): no 404."""
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml", headers=_HEADERS)


@router.get("/ui/static/{asset:path}")
async def ui_asset(asset: str) -> FileResponse:
    path = _ASSETS.get(asset)
    if path is None:
        shown = asset if len(asset) <= 80 else asset[:77] + "..."
        raise HTTPException(404, f"no UI asset {shown!r}")
    return FileResponse(path, media_type=_TYPES[path.suffix], headers=_HEADERS)
