"""Owns named, versioned datasets built from a query over the event log: the query, which samples
it selects, and the manifest that makes the dataset immutable and rebuildable.

Pure (stdlib only). A dataset query (``DatasetQuery``) names what to take from the project's
samples: kinds (``revision`` samples and ``good`` samples), sources (``traces``: samples made from
production traces; ``runs``: samples made by a run's search), task keys, a time range on the
recording time of the event that made each sample, run ids, trace ids, the outcome of the trace a
sample came from (a revision comes from a failed trace, a good sample from a successful one), and
the critic strategy that found the first error (revisions only), and by sample id: a selection
(``sample_ids``: only these) and exclusions (``exclude_sample_ids``: never these), each id one the
other filters take (``plan_dataset`` refuses any other). ``selects`` decides one sample from its
``SampleFacts``.

A dataset is built once (``plan_dataset``): the samples that match, in event-position order (then
sample id), among the events at or below the log position read at build time. The manifest
(``DatasetManifest``: entries with event positions, the log position, the code version, the
reflection-template ids and the export-format version) is stored in a ``DatasetCreated`` event and
never changes. Downloading reads exactly the manifest's entries from the event log, so every
download of a dataset is byte-identical; ``rebuild_check`` re-evaluates the stored query against
the log bounded by the manifest's log position and says whether the same entries come out.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.domain.ids import derived_id
from core.domain.trajectory import TrainingSample

SOURCES: tuple[str, ...] = ("traces", "runs")
KINDS: tuple[str, ...] = ("revision", "good")
OUTCOMES: tuple[str, ...] = ("success", "failure")
STRATEGIES: tuple[str, ...] = ("model", "direct", "rules")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
MAX_SAMPLES = 100_000
#: Bumped whenever the bytes a download produces for the same samples would change.
EXPORT_VERSION = 2


class DatasetQueryError(ValueError):
    """A dataset query or name is invalid; the message names the field and what to send."""


def _strings(value: Iterable[str], field: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    out = tuple(value)
    for item in out:
        if not isinstance(item, str) or not item:
            raise DatasetQueryError(f"{field}: every entry must be a non-empty string, got {item!r}")
        if allowed is not None and item not in allowed:
            raise DatasetQueryError(f"{field}: unknown value {item!r}; send one of {', '.join(allowed)}")
    return tuple(sorted(set(out)))


def _moment(value: str | None, field: str) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise DatasetQueryError(f"{field}: not an ISO 8601 time: {value!r}") from None
    if moment.tzinfo is None:
        raise DatasetQueryError(f"{field}: needs a time zone (e.g. 2026-01-01T00:00:00Z)")
    return moment


@dataclass(frozen=True)
class DatasetQuery:
    """What a dataset takes (every filter is optional; empty tuples mean "any").

    since / until: ISO 8601 times with a zone; a sample is in when since <= recorded_at < until.
    max_samples: the dataset is refused (not truncated) when more samples match.
    """

    kinds: tuple[str, ...] = KINDS
    sources: tuple[str, ...] = SOURCES
    task_keys: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    run_ids: tuple[str, ...] = ()
    trace_ids: tuple[str, ...] = ()
    outcome: str | None = None
    critic_strategies: tuple[str, ...] = ()
    max_samples: int = MAX_SAMPLES
    #: Render each assistant message's reasoning into its content (``fold_reasoning``) on export.
    include_reasoning: bool = False
    #: A selection: only these samples (each must be one the other filters take).
    sample_ids: tuple[str, ...] = ()
    #: Never these samples (each must be one the other filters take).
    exclude_sample_ids: tuple[str, ...] = ()

    def validated(self) -> DatasetQuery:
        """This query with sorted, de-duplicated lists; ``DatasetQueryError`` names a bad field."""
        clean = DatasetQuery(
            kinds=_strings(self.kinds, "query.kinds", KINDS),
            sources=_strings(self.sources, "query.sources", SOURCES),
            task_keys=_strings(self.task_keys, "query.task_keys"),
            since=self.since,
            until=self.until,
            run_ids=_strings(self.run_ids, "query.run_ids"),
            trace_ids=_strings(self.trace_ids, "query.trace_ids"),
            outcome=self.outcome,
            critic_strategies=_strings(self.critic_strategies, "query.critic_strategies", STRATEGIES),
            max_samples=self.max_samples,
            include_reasoning=self.include_reasoning,
            sample_ids=_strings(self.sample_ids, "query.sample_ids"),
            exclude_sample_ids=_strings(self.exclude_sample_ids, "query.exclude_sample_ids"),
        )
        both = sorted(set(clean.sample_ids) & set(clean.exclude_sample_ids))
        if both:
            raise DatasetQueryError(
                f"query.exclude_sample_ids: {len(both)} id(s) are also in query.sample_ids, first: {both[:3]}"
            )
        for name in ("sample_ids", "exclude_sample_ids"):
            if len(getattr(clean, name)) > MAX_SAMPLES:
                raise DatasetQueryError(f"query.{name}: at most {MAX_SAMPLES} ids")
        if not isinstance(clean.include_reasoning, bool):
            raise DatasetQueryError(
                f"query.include_reasoning must be true or false, got {clean.include_reasoning!r}"
            )
        if not clean.kinds:
            raise DatasetQueryError("query.kinds: name at least one of revision, good")
        if not clean.sources:
            raise DatasetQueryError("query.sources: name at least one of traces, runs")
        if clean.outcome is not None and clean.outcome not in OUTCOMES:
            raise DatasetQueryError(
                f"query.outcome: unknown value {clean.outcome!r}; send success or failure"
            )
        since, until = _moment(clean.since, "query.since"), _moment(clean.until, "query.until")
        if since is not None and until is not None and since >= until:
            raise DatasetQueryError("query.since must be before query.until")
        if isinstance(clean.max_samples, bool) or not 1 <= clean.max_samples <= MAX_SAMPLES:
            raise DatasetQueryError(
                f"query.max_samples must be in 1..{MAX_SAMPLES}, got {clean.max_samples!r}"
            )
        return clean

    @property
    def since_time(self) -> datetime | None:
        return _moment(self.since, "query.since")

    @property
    def until_time(self) -> datetime | None:
        return _moment(self.until, "query.until")


@dataclass(frozen=True)
class SampleFacts:
    """What the query looks at for one stored sample (from its row, its event and its provenance)."""

    sample_id: str
    kind: str  # revision | good
    position: int  # the position of the event that made the sample
    recorded_at: datetime
    run_id: str | None
    source: str  # "traces" or "runs"
    task_key: str | None
    trace_id: str | None
    critic_strategy: str | None
    template_id: str | None = None


def facts_from_provenance(
    sample_id: str,
    kind: str,
    position: int,
    recorded_at: datetime,
    run_id: str | None,
    provenance: dict[str, Any],
    template_id: str | None = None,
) -> SampleFacts:
    """Facts of a stored sample: trace samples name ``trace_id`` (revisions) or come from a
    ``source: trace`` provenance (good trace samples); everything else comes from a run."""
    from_trace = provenance.get("source") == "trace" or bool(provenance.get("trace_id"))
    trace_id = provenance.get("trace_id")
    task_key = provenance.get("task_key") or provenance.get("task_id")
    strategy = provenance.get("critic_strategy")
    return SampleFacts(
        sample_id=sample_id,
        kind=kind,
        position=position,
        recorded_at=recorded_at,
        run_id=run_id,
        source="traces" if from_trace else "runs",
        task_key=None if task_key is None else str(task_key),
        trace_id=None if trace_id is None else str(trace_id),
        critic_strategy=None if strategy is None else str(strategy),
        template_id=template_id,
    )


def selects(query: DatasetQuery, facts: SampleFacts) -> bool:
    """Whether ``query`` takes the sample described by ``facts``."""
    if query.sample_ids and facts.sample_id not in query.sample_ids:
        return False
    if facts.sample_id in query.exclude_sample_ids:
        return False
    return _filters_take(query, facts)


def _filters_take(query: DatasetQuery, facts: SampleFacts) -> bool:
    """Whether the query's filters (everything but its sample ids) take the sample."""
    if facts.kind not in query.kinds or facts.source not in query.sources:
        return False
    if query.task_keys and facts.task_key not in query.task_keys:
        return False
    since, until = query.since_time, query.until_time
    if since is not None and facts.recorded_at < since:
        return False
    if until is not None and facts.recorded_at >= until:
        return False
    if query.run_ids and facts.run_id not in query.run_ids:
        return False
    if query.trace_ids and facts.trace_id not in query.trace_ids:
        return False
    if query.outcome is not None:
        if facts.source != "traces":
            return False
        if (query.outcome == "failure") != (facts.kind == "revision"):
            return False
    return not query.critic_strategies or facts.critic_strategy in query.critic_strategies


@dataclass(frozen=True)
class DatasetEntry:
    sample_id: str
    kind: str
    position: int  # the event that holds the sample (RevisionMaterialized / GoodTrajectoryFound / ...)
    template_id: str | None = None


@dataclass(frozen=True)
class DatasetManifest:
    """Everything a dataset is: its entries in order and what they were read under."""

    dataset_id: str
    name: str
    version: int
    query: DatasetQuery
    log_position: int  # the highest event position when the dataset was built
    entries: tuple[DatasetEntry, ...]
    code_version: str
    export_version: int = EXPORT_VERSION
    warnings: tuple[str, ...] = ()  # what a download of these samples lacks (missing_tool_definitions)

    @property
    def template_ids(self) -> tuple[str, ...]:
        return tuple(sorted({e.template_id for e in self.entries if e.template_id}))

    @property
    def counts(self) -> dict[str, int]:
        out = {kind: 0 for kind in KINDS}
        for entry in self.entries:
            out[entry.kind] = out.get(entry.kind, 0) + 1
        return out

    @property
    def entries_sha256(self) -> str:
        return entries_digest(self.entries)


def entries_digest(entries: Iterable[DatasetEntry]) -> str:
    blob = json.dumps(
        [[e.sample_id, e.kind, e.position, e.template_id] for e in entries], separators=(",", ":")
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise DatasetQueryError(
            f"name: {name!r} is not a dataset name; send 1-100 characters of letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    return name


def dataset_id_for(project_id: str, name: str, version: int) -> str:
    return derived_id("trace-dataset", project_id, name, version)


def _select(query: DatasetQuery, log_position: int, candidates: Iterable[SampleFacts]) -> list[SampleFacts]:
    """The selected candidates at or below ``log_position``, each sample once (its first event),
    in (position, sample id) order."""
    chosen: dict[str, SampleFacts] = {}
    for facts in candidates:
        if facts.position <= log_position and selects(query, facts):
            known = chosen.get(facts.sample_id)
            if known is None or facts.position < known.position:
                chosen[facts.sample_id] = facts
    return sorted(chosen.values(), key=lambda f: (f.position, f.sample_id))


def _check_sample_ids(query: DatasetQuery, log_position: int, candidates: Iterable[SampleFacts]) -> None:
    """Every selected or excluded id must be a sample the query's other filters take (at or below
    ``log_position``): an id of no such sample is a mistake (a typo, another project's sample, a
    filter that already leaves it out), refused with the first few ids."""
    if not query.sample_ids and not query.exclude_sample_ids:
        return
    taken = {f.sample_id for f in candidates if f.position <= log_position and _filters_take(query, f)}
    for name in ("sample_ids", "exclude_sample_ids"):
        unknown = [sid for sid in getattr(query, name) if sid not in taken]
        if unknown:
            raise DatasetQueryError(
                f"query.{name}: {len(unknown)} id(s) are not samples the query's other filters take "
                f"(unknown, another project's, or left out by kinds / sources / ...), first: {unknown[:3]}"
            )


def plan_dataset(
    *,
    project_id: str,
    name: str,
    version: int,
    query: DatasetQuery,
    log_position: int,
    candidates: Iterable[SampleFacts],
    code_version: str,
    allow_empty: bool = False,
) -> DatasetManifest:
    """The manifest of a new dataset: every candidate the query selects at or below
    ``log_position``, in (position, sample id) order, each sample once. Refuses an empty dataset
    (unless ``allow_empty``) and one larger than ``query.max_samples`` (with the count)."""
    check_name(name)
    query = query.validated()
    if version < 1:
        raise DatasetQueryError(f"version must be >= 1, got {version}")
    candidates = list(candidates)
    _check_sample_ids(query, log_position, candidates)
    ordered = _select(query, log_position, candidates)
    if not ordered and not allow_empty:
        raise DatasetQueryError(
            "query: no sample matches; widen the query (kinds, sources, task_keys, time) "
            "or send allow_empty=true"
        )
    if len(ordered) > query.max_samples:
        raise DatasetQueryError(
            f"query: {len(ordered)} samples match, more than max_samples={query.max_samples}; "
            "narrow the query or raise max_samples"
        )
    return DatasetManifest(
        dataset_id=dataset_id_for(project_id, name, version),
        name=name,
        version=version,
        query=query,
        log_position=log_position,
        entries=tuple(DatasetEntry(f.sample_id, f.kind, f.position, f.template_id) for f in ordered),
        code_version=code_version,
    )


def rebuild_check(manifest: DatasetManifest, candidates: Iterable[SampleFacts]) -> list[str]:
    """Re-run the manifest's query over ``candidates`` (bounded by its log position): the
    differences from the stored entries (empty = the dataset rebuilds identically)."""
    again = [
        DatasetEntry(f.sample_id, f.kind, f.position, f.template_id)
        for f in _select(manifest.query, manifest.log_position, candidates)
    ]
    problems: list[str] = []
    stored = {e.sample_id: e for e in manifest.entries}
    now = {e.sample_id: e for e in again}
    missing = [sid for sid in stored if sid not in now]
    extra = [sid for sid in now if sid not in stored]
    if missing:
        problems.append(f"{len(missing)} sample(s) of the manifest no longer match, first: {missing[:3]}")
    if extra:
        problems.append(f"{len(extra)} sample(s) match now but are not in the manifest, first: {extra[:3]}")
    if not problems and tuple(again) != manifest.entries:
        problems.append("the same samples come out in a different order or from different events")
    return problems


def missing_tool_definitions(samples: Iterable[TrainingSample]) -> str | None:
    """The warning for samples that call tools but carry no tool definitions (the traces they came
    from sent none): a fine-tuning file needs a ``tools`` list for them, and agentr does not invent
    one. Names the samples (the first 20), or None when every sample with calls has definitions."""
    lacking = [s.sample_id for s in samples if not s.tools and any(m.tool_calls for m in s.messages)]
    if not lacking:
        return None
    shown = ", ".join(lacking[:20]) + (f" and {len(lacking) - 20} more" if len(lacking) > 20 else "")
    return (
        f"{len(lacking)} sample(s) call tools but carry no tool definitions (their traces sent none), so "
        f"their records have tool_calls and no tools list: {shown}; send the definitions with the traces "
        "(tools, gen_ai.tool.definitions, llm.tools) to have them exported"
    )
