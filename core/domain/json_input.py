"""Owns reading JSON text that came from outside (tool-call arguments, OTel attribute values, ShareGPT
``tools``): ``loads``, ``json.loads`` whose only failure is ``json.JSONDecodeError``.

Python refuses to turn more than ``sys.get_int_max_str_digits()`` (4,300 by default) digits into an
int, and ``json.loads`` lets that ValueError out as it is, so every ``except json.JSONDecodeError``
around it missed a JSON text holding such an integer (a 500 in the API, a crashed worker). ``loads``
reports it as a ``JSONDecodeError`` at the integer's position: such text is treated like any other
text that is not JSON (kept verbatim where the caller keeps malformed JSON, a 422 naming the field
where the caller requires JSON).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

_DIGITS = re.compile(r"-?\d+")


class _IntTooLong(ValueError):
    pass


def _int(text: str) -> int:
    limit = sys.get_int_max_str_digits()
    if limit and len(text.lstrip("-")) > limit:
        raise _IntTooLong(limit)
    return int(text)


def int_too_long(digits: str) -> bool:
    """Whether ``digits`` (an optional sign, then digits) is too long for ``int()`` to read."""
    limit = sys.get_int_max_str_digits()
    return bool(limit) and len(digits.lstrip("+-")) > limit


def loads(text: str) -> Any:
    """``json.loads(text)``, raising ``json.JSONDecodeError`` (never a bare ValueError) when an
    integer in it has more digits than Python reads."""
    try:
        return json.loads(text, parse_int=_int)
    except _IntTooLong as exc:
        limit = exc.args[0]
        position = next((m.start() for m in _DIGITS.finditer(text) if int_too_long(m.group())), 0)
        raise json.JSONDecodeError(f"an integer of more than {limit} digits", text, position) from None
