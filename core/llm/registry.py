"""Owns policy references: turns a string naming a model into a Policy backend.

* a local folder (``./models/tiny``, ``/abs/path``) -> :class:`core.llm.hf.HFPolicy`
* ``http(s)://host:port/v1`` -> :class:`core.llm.openai_compat.OpenAIPolicy`; name the model with
  ``#model-name`` or ``?model=model-name`` (else the server's only model is used). With ``egress``
  (a worker's: ``Settings.egress``, core/domain/egress.py) a URL outside the operator's allow-list is
  refused with PolicyError before any request, and the server's key goes only to the base URLs it is
  paired with; without it (the command line, on its user's machine) every URL is opened and
  ``OPENAI_API_KEY`` is sent to it. An explicit ``api_key`` is always sent. ``?structured=guided`` sends
  constrained decoding as an older vLLM's ``guided_regex`` (default: ``structured_outputs``;
  core/llm/openai_compat.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from core.domain.egress import Egress
from core.llm.ports import Policy, PolicyError


def split_openai_ref(ref: str) -> tuple[str, str | None]:
    """``http://h:p/v1#name`` or ``http://h:p/v1?model=name`` -> (base URL, model name or None)."""
    parts = urlsplit(ref)
    if not parts.netloc:
        raise PolicyError(f"model URL {ref!r} has no host")
    query = parse_qs(parts.query)
    model = parts.fragment or None
    if "model" in query:
        model = query.pop("model")[0]
    rest = urlencode({k: v[0] for k, v in query.items()})
    base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), rest, ""))
    return base, model


def open_policy(
    ref: str,
    *,
    device: str | None = None,
    dtype: Any = None,
    api_key: str | None = None,
    egress: Egress | None = None,
    **openai_options: Any,
) -> Policy:
    """Open the policy ``ref`` names (a model folder or an OpenAI-compatible base URL); ``egress``:
    the served models this process may call (module docstring)."""
    if not ref or not ref.strip():
        raise PolicyError("empty model reference: give a model folder or an http(s):// base URL")
    ref = ref.strip()
    if ref.lower().startswith(("http://", "https://")):
        from core.llm.openai_compat import OpenAIPolicy

        egress = egress or Egress.local(os.environ.get("OPENAI_API_KEY") or None)
        refused = egress.model_problem(ref)
        if refused is not None:
            raise PolicyError(refused)

        structured = parse_qs(urlsplit(ref).query).get("structured")
        if structured:  # ?structured=guided: an older vLLM's guided_* fields (constrained decoding)
            ref = _without_query_key(ref, "structured")
            openai_options.setdefault("structured_field", structured[0])
        base, model = split_openai_ref(ref)
        return OpenAIPolicy(base, model, api_key or egress.model_key(ref), **openai_options)
    if "://" in ref:
        raise PolicyError(f"unsupported model reference scheme in {ref!r}: use a folder or http(s)://")
    from core.llm.hf import HFPolicy

    return HFPolicy.from_folder(Path(ref), device=device, dtype=dtype)


def _without_query_key(ref: str, key: str) -> str:
    parts = urlsplit(ref)
    query = {k: v[0] for k, v in parse_qs(parts.query).items() if k != key}
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))


def egress_checked(opener: Callable[[str], Policy], egress: Egress) -> Callable[[str], Policy]:
    """``opener`` behind ``egress``: a served model outside it is refused (PolicyError) before
    ``opener`` runs. A worker wraps whatever opener it was given, so no opener can skip the check."""

    def checked(ref: str) -> Policy:
        if ref.strip().lower().startswith(("http://", "https://")):
            refused = egress.model_problem(ref)
            if refused is not None:
                raise PolicyError(refused)
        return opener(ref)

    return checked
