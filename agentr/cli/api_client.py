"""Owns what every API client command shares: the ``--api`` / ``--key`` options (``AGENTR_API_URL``,
default http://127.0.0.1:8000; ``AGENTR_API_KEY``), the HTTP client and how an API error becomes a
clear message and exit code."""

from __future__ import annotations

from typing import Any, NoReturn

import typer

API_URL_ENV = "AGENTR_API_URL"
API_KEY_ENV = "AGENTR_API_KEY"
TERMINAL = ("completed", "cancelled", "failed")

ApiOption = typer.Option(
    "http://127.0.0.1:8000", "--api", envvar=API_URL_ENV, help="Base URL of the agentr API."
)
KeyOption = typer.Option(..., "--key", envvar=API_KEY_ENV, help="API key (agr_...).", show_default=False)


class ApiCallError(Exception):
    pass


def _client(api: str, key: str) -> Any:
    import httpx

    return httpx.Client(
        base_url=api.rstrip("/"),
        headers={"Authorization": f"Bearer {key}"},
        timeout=httpx.Timeout(60, connect=10),
    )


def _check(response: Any) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
            detail = body.get("detail", response.text)
        except ValueError:
            detail = response.text
        raise ApiCallError(
            f"{response.request.method} {response.request.url.path} -> {response.status_code}: {detail}"
        )
    return response


def _fail(exc: Exception) -> NoReturn:
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    raise typer.Exit(1)


def _call(fn: Any) -> Any:
    import httpx

    try:
        return fn()
    except ApiCallError as exc:
        _fail(exc)
    except httpx.HTTPError as exc:
        _fail(RuntimeError(f"cannot reach the API: {exc}"))
