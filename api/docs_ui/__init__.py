"""Owns ``/docs``: Swagger UI over /openapi.json, served entirely from this server.

The Swagger UI files come from the ``swagger-ui-bundle`` package (installed with agentr; nothing is
loaded from a CDN, so /docs works on a machine without internet). The page is ours
(``index.html`` and ``init.js`` here, no inline script), so the Content-Security-Policy allows
scripts from this origin only. Swagger UI sets inline style attributes, hence ``style-src
'unsafe-inline'``; ``connect-src 'self'`` keeps "Try it out" on this server.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

HERE = Path(str(resources.files("api.docs_ui"))).resolve()
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}
_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}

router = APIRouter(include_in_schema=False)


def _bundle() -> Path | None:
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    return Path(swagger_ui_path)


@router.get("/docs")
async def docs_page() -> FileResponse:
    return FileResponse(HERE / "index.html", media_type="text/html", headers=HEADERS)


@router.get("/docs/")
async def docs_slash() -> RedirectResponse:
    return RedirectResponse("/docs", status_code=307, headers=HEADERS)


@router.get("/docs/init.js")
async def docs_init() -> FileResponse:
    return FileResponse(HERE / "init.js", media_type="text/javascript", headers=HEADERS)


@router.get("/docs/assets/{name}")
async def docs_asset(name: str) -> FileResponse:
    bundle = _bundle()
    if name not in _ASSETS or bundle is None or not (bundle / name).is_file():
        raise HTTPException(404, f"no docs asset {name!r} (is swagger-ui-bundle installed?)")
    return FileResponse(bundle / name, media_type=_ASSETS[name], headers=HEADERS)
