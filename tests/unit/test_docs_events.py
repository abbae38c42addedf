"""Keeps docs/events.md (the event catalog) in step with the code.

The page's layout is described in its "Editing this page" section. Checked here: every registered
event type has exactly one ``### Name`` section (and every section names a registered type), with the
code's version, fields (name, annotation, default, order), a stream that follows core/domain/ids.py,
producers that match where the code constructs the event, consumers that match the services'
handler maps, and read models that match the projectors. Value objects and envelope classes are
checked the same way for their fields.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentr.process import SERVICE_MODULES, build_service
from core.domain import events as ev
from core.domain import ids, trajectory
from core.domain.serde import to_dict
from core.runtime.settings import load_settings
from core.runtime.worker import DEAD_LETTER_STREAM
from core.store.factory import open_store
from core.store.projections import PROJECTORS
from core.store.tables import PROJECTION_TABLES

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "events.md"

EVENT_SECTION_PREFIX = "Events"
DOCUMENTED_CLASSES: dict[str, dict[str, type]] = {
    "Value objects": {
        cls.__name__: cls
        for cls in (
            ev.NodeRecord,
            ev.StepVerdict,
            trajectory.Trajectory,
            trajectory.Step,
            trajectory.TrainingSample,
            trajectory.Message,
            trajectory.ToolCall,
            trajectory.ToolResult,
        )
    },
    "Storage and delivery": {cls.__name__: cls for cls in (ev.RecordedEvent, ev.Metadata, ev.NewEvent)},
}

#: Producer names of the doc -> the source files (or folders) where that part of the system lives.
PRODUCER_SOURCES: dict[str, tuple[str, ...]] = {
    "api": ("api/",),
    "cli": ("agentr/cli/",),
    "search": ("search_service/",),
    "critic": ("critic_service/service.py", "critic_service/critic.py"),
    "splice": ("splice_service/",),
    "train": ("train_service/", "core/domain/runs.py"),
    "worker runtime": ("core/runtime/", "core/bus/"),
}
SCANNED = ("agentr", "api", "core", "search_service", "critic_service", "splice_service", "train_service")

STREAM_FUNCTIONS: tuple[Callable[[str], str], ...] = (
    ids.run_stream,
    ids.tree_stream,
    ids.pair_stream,
    ids.trace_stream,
    ids.project_stream,
    ids.otlp_stream,
    ids.dataset_stream,
    ids.episodes_stream,
)

FIELD_LINE = re.compile(
    r"^- `(?P<name>\w+)` \(`(?P<type>[^`]+)`(?:, default `(?P<default>[^`]*)`)?\): (?P<text>.*)$"
)
META_LINE = re.compile(r"^- \*\*(?P<key>[A-Za-z ]+):\*\* (?P<value>.*)$")


@dataclass
class Section:
    name: str
    parent: str
    meta: dict[str, str] = field(default_factory=dict)
    fields: list[tuple[str, str, str | None, str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def parse(text: str) -> list[Section]:
    """Every ``###`` section with the ``##`` section it sits in, its meta lines and field lines."""
    sections: list[Section] = []
    parent = ""
    current: Section | None = None
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        if line.startswith("## "):
            parent = line[3:].strip()
            current = None
        elif line.startswith("### "):
            current = Section(line[4:].strip(), parent)
            sections.append(current)
        elif current is not None:
            current.lines.append(line)
            if m := FIELD_LINE.match(line):
                current.fields.append((m["name"], m["type"], m["default"], m["text"].strip()))
            elif m := META_LINE.match(line):
                current.meta[m["key"]] = m["value"].strip()
    return sections


@pytest.fixture(scope="module")
def sections() -> list[Section]:
    assert DOC.is_file(), f"{DOC} is missing"
    return parse(DOC.read_text(encoding="utf-8"))


def event_sections(sections: list[Section]) -> dict[str, Section]:
    found: dict[str, Section] = {}
    for s in sections:
        if s.parent.startswith(EVENT_SECTION_PREFIX):
            assert s.name not in found, f"docs/events.md documents {s.name} twice"
            found[s.name] = s
    return found


def production_event_types() -> dict[str, type[ev.DomainEvent]]:
    """Registered event types defined outside tests/ (test modules register their own)."""
    out = {}
    for name, cls in ev.all_event_types().items():
        module = sys.modules.get(cls.__module__)
        source = Path(getattr(module, "__file__", "") or "").resolve()
        if (ROOT / "tests") in source.parents:
            continue
        out[name] = cls
    return out


def expected_fields(cls: type) -> list[tuple[str, str, str | None]]:
    """(name, annotation, default as documented) per dataclass field, in order."""
    out = []
    for f in dataclasses.fields(cls):
        default: str | None = None
        if f.default is not dataclasses.MISSING:
            default = json.dumps(to_dict(f.default))
        elif f.default_factory is not dataclasses.MISSING:
            factory: Any = f.default_factory
            if factory in (dict, list, tuple):
                default = json.dumps(to_dict(factory()))
            else:
                default = f"{factory.__name__}()"
        out.append((f.name, " ".join(str(f.type).split()), default))
    return out


def check_fields(section: Section, cls: type) -> list[str]:
    problems = []
    documented = [(n, " ".join(t.split()), d) for n, t, d, _ in section.fields]
    expected = expected_fields(cls)
    if documented != expected:
        want = "\n".join(f"  - {n} ({t}{'' if d is None else ', default ' + d})" for n, t, d in expected)
        got = "\n".join(f"  - {n} ({t}{'' if d is None else ', default ' + d})" for n, t, d in documented)
        problems.append(
            f"{section.name}: documented fields differ from the code.\ncode:\n{want}\ndoc:\n{got}"
        )
    for name, _, _, meaning in section.fields:
        if not meaning:
            problems.append(f"{section.name}.{name}: no meaning given")
    stray = [line for line in section.lines if line.startswith("- `") and not FIELD_LINE.match(line)]
    if stray:
        problems.append(
            f"{section.name}: field lines not in the layout ``- `name` (`type`): meaning``: {stray}"
        )
    return problems


def names_of(value: str) -> list[str]:
    """The comma-separated names before ' — ' in a meta line."""
    head = value.split(" — ", 1)[0]
    return [n.strip().strip("`") for n in head.split(",") if n.strip()]


def constructed_in() -> dict[str, set[str]]:
    """Event type -> production source files (relative) that construct it (``Name(...)`` calls)."""
    names = set(production_event_types())
    found: dict[str, set[str]] = {n: set() for n in names}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                called = (
                    func.id
                    if isinstance(func, ast.Name)
                    else func.attr
                    if isinstance(func, ast.Attribute)
                    else None
                )
                if called in found:
                    found[called].add(rel)
    return found


def producer_of(rel: str) -> str | None:
    for producer, prefixes in PRODUCER_SOURCES.items():
        if any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in prefixes):
            return producer
    return None


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


def test_every_registered_event_is_documented_and_nothing_else(sections: list[Section]) -> None:
    registered = set(production_event_types())
    documented = set(event_sections(sections))
    missing = sorted(registered - documented)
    gone = sorted(documented - registered)
    problems = []
    if missing:
        problems.append(f"event types registered in code but missing from docs/events.md: {missing}")
    if gone:
        problems.append(f"docs/events.md documents event types that no longer exist: {gone}")
    assert not problems, "\n".join(problems)


def test_event_fields_versions_and_streams_match_the_code(sections: list[Section]) -> None:
    types = production_event_types()
    problems: list[str] = []
    for name, section in event_sections(sections).items():
        cls = types.get(name)
        if cls is None:
            continue  # reported by the test above
        problems += check_fields(section, cls)
        for key in ("Version", "Stream", "Produced by", "Consumed by", "Read models"):
            if key not in section.meta:
                problems.append(f"{name}: no '- **{key}:** ...' line")
        version = section.meta.get("Version", "")
        if version != str(cls.event_version):
            problems.append(f"{name}: documented version {version!r}, code has {cls.event_version}")
        stream = section.meta.get("Stream", "").strip("`")
        field_names = [f.name for f in dataclasses.fields(cls)]
        allowed = {fn("{" + f + "}") for fn in STREAM_FUNCTIONS for f in field_names} | {DEAD_LETTER_STREAM}
        if stream not in allowed:
            problems.append(
                f"{name}: stream {stream!r} is not one of core.domain.ids' streams over its fields"
            )
    assert not problems, "\n".join(problems)


def test_documented_producers_match_where_the_code_builds_each_event(sections: list[Section]) -> None:
    built = constructed_in()
    problems: list[str] = []
    for name, section in event_sections(sections).items():
        if name not in built:
            continue
        documented = set(names_of(section.meta.get("Produced by", "")))
        unknown = documented - set(PRODUCER_SOURCES)
        if unknown:
            problems.append(
                f"{name}: unknown producer name(s) {sorted(unknown)} (use {sorted(PRODUCER_SOURCES)})"
            )
        actual: set[str] = set()
        for rel in built[name]:
            producer = producer_of(rel)
            if producer is None:
                problems.append(f"{name}: built in {rel}, which no producer name of the doc covers")
            else:
                actual.add(producer)
        if documented != actual:
            problems.append(
                f"{name}: doc says produced by {sorted(documented)}, code builds it in {sorted(actual)}"
            )
    assert not problems, "\n".join(problems)


async def test_documented_consumers_match_the_services_handlers(
    sections: list[Section], sqlite_url: str
) -> None:
    store = await open_store(sqlite_url, create_tables=True)
    try:
        handled: dict[str, set[str]] = {}
        for service_name in SERVICE_MODULES:
            service = await build_service(service_name, load_settings(database_url=sqlite_url), store)
            for event_type in service.handlers:
                handled.setdefault(event_type, set()).add(service.name)
            if service.on_close is not None:
                await service.on_close()
    finally:
        await store.close()
    documented_types = event_sections(sections)
    problems = [f"{t}: handled by a service but not documented" for t in handled if t not in documented_types]
    for name, section in documented_types.items():
        documented = set(names_of(section.meta.get("Consumed by", ""))) - {"none"}
        actual = handled.get(name, set())
        if documented != actual:
            problems.append(
                f"{name}: doc says consumed by {sorted(documented) or 'none'}, "
                f"handlers: {sorted(actual) or 'none'}"
            )
    assert not problems, "\n".join(problems)


def test_documented_read_models_match_the_projectors(sections: list[Section]) -> None:
    tables = {t.name for t in PROJECTION_TABLES}
    problems: list[str] = []
    for name, section in event_sections(sections).items():
        documented = names_of(section.meta.get("Read models", ""))
        if name in PROJECTORS:
            if documented in ([], ["none"]):
                problems.append(f"{name}: a projector handles it but the doc lists no read model")
            unknown = sorted(set(documented) - tables)
            if unknown:
                problems.append(f"{name}: {unknown} are not projection tables ({sorted(tables)})")
        elif documented != ["none"]:
            problems.append(f"{name}: no projector handles it, the doc lists {documented} (write 'none')")
    assert not problems, "\n".join(problems)


def test_value_objects_and_envelope_fields_match_the_code(sections: list[Section]) -> None:
    problems: list[str] = []
    for parent, classes in DOCUMENTED_CLASSES.items():
        found = {s.name: s for s in sections if s.parent == parent and s.fields}
        for class_name, cls in classes.items():
            section = found.get(class_name)
            if section is None:
                problems.append(
                    f"{class_name}: no '### {class_name}' section with fields under '## {parent}'"
                )
                continue
            problems += check_fields(section, cls)
    assert not problems, "\n".join(problems)


def test_the_parser_catches_a_drifted_field_list() -> None:
    """The checks above are only as good as the parser: a wrong doc must be reported."""
    text = (
        "## Events: runs\n\n### RunCancelled\n\n- **Version:** 1\n\n"
        "- `run_id` (`str`): the run.\n- `why` (`str`): renamed.\n"
    )
    (section,) = parse(text)
    problems = check_fields(section, ev.RunCancelled)
    assert len(problems) == 1 and "differ" in problems[0] and "why" in problems[0]
    good = parse(
        "## Events: runs\n\n### RunCancelled\n\n"
        '- `run_id` (`str`): the run.\n- `reason` (`str`, default `"cancelled by user"`): why.\n'
    )
    assert check_fields(good[0], ev.RunCancelled) == []
