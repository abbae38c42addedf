"""ARCHITECTURE.md's event lines say where each event is produced and consumed - and they are true.

Each registered event has exactly one line ``- **Name** (`stream module`): produced by ...; consumed
by ...; read model: ...`` under "Where each event is produced and consumed", built here from the code
itself: the production files that construct it (``Name(...)`` calls, as tests/unit/test_docs_events.py
finds them), the services whose handler maps take it (with the file of the handler) and the projector
that keeps its read model. A new event, a moved producer or a new handler without the doc line fails.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from agentr.process import SERVICE_MODULES, build_service
from core.domain.events import DomainEvent
from core.runtime.settings import load_settings
from core.store.factory import open_store
from core.store.projections import PROJECTORS
from tests.unit.test_docs_events import constructed_in, production_event_types

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "ARCHITECTURE.md"
EVENT_LINE = re.compile(r"^- \*\*[A-Z]\w+\*\* \(`")
STREAM_ORDER = ("projects", "runs", "search", "pairs", "traces", "learners", "datasets", "operations")


def _relative(obj: object) -> str:
    target = obj if inspect.isfunction(obj) or inspect.ismethod(obj) else type(obj)
    return Path(inspect.getsourcefile(target) or "").resolve().relative_to(ROOT).as_posix()  # type: ignore[arg-type]


async def handled_by(sqlite_url: str) -> dict[str, list[str]]:
    """Event type -> ``service (`file of its handler`)`` for every worker service."""
    store = await open_store(sqlite_url, create_tables=True)
    out: dict[str, list[str]] = {}
    try:
        for name in SERVICE_MODULES:
            service = await build_service(name, load_settings(database_url=sqlite_url), store)
            for event_type, handler in service.handlers.items():
                out.setdefault(event_type, []).append(f"{service.name} (`{_relative(handler)}`)")
            if service.on_close is not None:
                await service.on_close()
    finally:
        await store.close()
    return out


def _order(item: tuple[str, type[DomainEvent]]) -> tuple[int, int]:
    cls = item[1]
    return STREAM_ORDER.index(cls.__module__.rsplit(".", 1)[1]), inspect.getsourcelines(cls)[1]


def event_lines(handled: dict[str, list[str]]) -> list[str]:
    built = constructed_in()
    lines = []
    for name, cls in sorted(production_event_types().items(), key=_order):
        producers = ", ".join(f"`{p}`" for p in sorted(built.get(name, ()))) or "none"
        consumers = "; ".join(sorted(handled.get(name, []))) or "no service"
        projector = PROJECTORS.get(name)
        read_model = f"; read model: `{_relative(projector)}`" if projector is not None else ""
        stream = cls.__module__.rsplit(".", 1)[1]
        lines.append(
            f"- **{name}** (`{stream}`): produced by {producers}; consumed by {consumers}{read_model}."
        )
    return lines


async def test_architecture_names_where_each_event_is_produced_and_consumed(sqlite_url: str) -> None:
    expected = event_lines(await handled_by(sqlite_url))
    documented = [line for line in DOC.read_text(encoding="utf-8").splitlines() if EVENT_LINE.match(line)]
    missing = [line for line in expected if line not in documented]
    stale = [line for line in documented if line not in expected]
    assert not missing and not stale, (
        "ARCHITECTURE.md's event lines differ from the code.\nwrite:\n"
        + "\n".join(missing)
        + "\nremove:\n"
        + "\n".join(stale)
    )
