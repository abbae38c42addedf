"""Owns the API's rules for model references: which folders a caller may name, and their shape.

A model reference sent to the API (``model``, ``train.model_path``, ``critic.value_model`` of a run,
``critic.model`` of a trace batch) is either the http(s) URL of a served model or a folder INSIDE
one of the server's model roots (``AGENTR_MODEL_ROOTS``; default ``AGENTR_HOME/models`` and
``AGENTR_HOME/runs``, the model store and the runs' checkpoints). A relative name is a folder of the
first root, and is stored as that absolute path, so every worker opens the folder the API checked.

The check is lexical first (no file-system access for a reference outside the roots), then the
resolved path (symlinks followed) must stay inside a root too. Every refusal carries the same
message whether or not the path exists, so a key cannot probe the server's file system. Inside the
roots, a run's folder that does not exist is refused at submission, naming it (``missing_folder``):
the workers would otherwise fail every tree without saying which folder they looked for.

A served model's URL must lie under the operator's ``AGENTR_ALLOWED_MODEL_URLS`` and a run's remote
environment under ``AGENTR_ALLOWED_ENV_URLS`` (``Settings.egress``, core/domain/egress.py: default
none); anything else is refused naming the setting (``egress_problem``), and the workers check again.

``path_shape_problem`` is the input layer's bound on any path: no component longer than 255
characters (NAME_MAX) and at most 4,096 bytes in all (PATH_MAX), checked without touching the disk;
the same rule is the field's pattern in the OpenAPI document (``MODEL_REF_PATTERN``). A component
of fewer characters but more bytes is a name no file system holds: the template check treats it as
a folder that is not here, and the workers refuse it as a model they cannot open.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from pathlib import Path

from core.domain.config import TRAIN_MODEL_PATH, RunConfig, is_served_model
from core.domain.egress import Egress

MAX_NAME_CHARS = 255
MAX_PATH_BYTES = 4096

OUTSIDE_ROOTS = (
    "must be the http(s):// URL of a served model or a folder inside the server's model roots "
    "(AGENTR_MODEL_ROOTS)"
)


MODEL_REF_PATTERN = (
    r"^(?:[ \t\n\r\f\v]*[Hh][Tt][Tt][Pp][Ss]?://[\s\S]*"
    r"|[^/]{0,255}(?:/[^/]{0,255})*)$"
)
"""A served model's http(s) URL, or a path whose components are at most 255 characters: the rule
``path_shape_problem`` applies, stated in the OpenAPI document as the field's pattern."""
_MODEL_REF = re.compile(MODEL_REF_PATTERN)


def path_shape_problem(ref: str) -> str | None:
    """Why ``ref`` cannot be a model reference: a path with a component over 255 characters (the
    NAME_MAX of common file systems, checked without touching the disk), or more than 4,096 bytes
    in all; None when it can. URLs are not paths: only their length is bounded."""
    if len(ref.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"at most {MAX_PATH_BYTES} bytes"
    if _MODEL_REF.fullmatch(ref) is None:
        return f"a path component is longer than {MAX_NAME_CHARS} characters"
    return None


def _inside(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def resolve_model_ref(ref: str, roots: Sequence[Path]) -> str | None:
    """The reference a worker should open (a URL as given; a folder as an absolute path inside a
    root), or None when ``ref`` is outside the roots. Touches the disk only inside a root."""
    ref = ref.strip()
    if is_served_model(ref):
        return ref
    if not ref or "://" in ref or not roots or path_shape_problem(ref) is not None:
        return None
    lexical_roots = [os.path.normpath(str(root)) for root in roots]
    candidate = ref if os.path.isabs(ref) else os.path.join(lexical_roots[0], ref)
    normalised = os.path.normpath(candidate)
    if not _inside(normalised, lexical_roots):
        return None
    real_roots = [os.path.realpath(root) for root in lexical_roots]
    if not _inside(os.path.realpath(normalised), real_roots):
        return None  # a symlink inside a root that leads out of every root
    return normalised


def model_ref_problem(ref: str, roots: Sequence[Path], egress: Egress) -> tuple[str | None, str | None]:
    """``(resolved, None)`` for a reference a worker may open (a URL as given, a folder as its absolute
    path inside a root), else ``(None, why)``: a URL outside the allow-list (naming the setting) or a
    path outside the roots (``OUTSIDE_ROOTS``, the same answer whether or not it exists)."""
    if is_served_model(ref):
        refused = egress.model_problem(ref)
        return (ref.strip(), None) if refused is None else (None, refused)
    resolved = resolve_model_ref(ref, roots)
    return (resolved, None) if resolved is not None else (None, OUTSIDE_ROOTS)


def missing_folder(given: str, resolved: str) -> str | None:
    """Why the folder ``given`` (resolved inside a root) cannot be a run's model: it does not exist.
    Names the folder as the caller wrote it (not the server's absolute path)."""
    if is_served_model(resolved):
        return None
    try:
        if os.path.isdir(resolved):
            return None
    except (OSError, ValueError):
        pass
    return (
        f"model folder {given.strip()!r} does not exist inside the server's model roots (AGENTR_MODEL_ROOTS)"
    )


def rooted_run_config(
    config: RunConfig, roots: Sequence[Path], egress: Egress
) -> tuple[RunConfig, tuple[str, str] | None]:
    """``config`` with its model references resolved inside ``roots`` (``model``,
    ``train.model_path``, ``critic.value_model``), or ``(field, why)`` for the first one refused: a
    served model or remote environment outside ``egress``, a path outside the roots, a folder that
    is not there."""
    refused = egress.env_problem(config.env)
    if refused is not None:
        return config, ("env", refused)
    model, why = model_ref_problem(config.model, roots, egress)
    if model is None:
        return config, ("model", why or OUTSIDE_ROOTS)
    missing = missing_folder(config.model, model)
    if missing is not None:
        return config, ("model", missing)
    train, critic = dict(config.train), dict(config.critic)
    for name, section, key in (("train", train, TRAIN_MODEL_PATH), ("critic", critic, "value_model")):
        ref = section.get(key)
        if ref is None:
            continue
        resolved, why = model_ref_problem(str(ref), roots, egress)
        if resolved is None:
            return config, (f"{name}.{key}", why or OUTSIDE_ROOTS)
        missing = missing_folder(str(ref), resolved)
        if missing is not None:
            return config, (f"{name}.{key}", missing)
        section[key] = resolved
    return dataclasses.replace(config, model=model, train=train, critic=critic), None
