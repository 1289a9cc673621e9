"""Our JSON spec form, read into plain data (the model validates it; see :func:`mas_orchestra.spec.parse_spec`)."""

from __future__ import annotations

import json
from typing import Any

from mas_orchestra.errors import SpecError
from mas_orchestra.spec.limits import MAX_TEXT_CHARS, Dom

__all__ = ["read_json_spec"]


def read_json_spec(text: str | bytes, *, dom: Dom | None = None) -> Any:
    """The decoded JSON of a spec text; ``dom`` fills in the DoM of an object that states none.

    What the JSON holds is checked when it is validated into a :class:`~mas_orchestra.spec.GraphSpec`.

    Args:
        text: The spec text (bytes are decoded as UTF-8).
        dom: The DoM of an object that states none.

    Raises:
        SpecError: Text over :data:`MAX_TEXT_CHARS` or invalid JSON.
        TypeError: ``text`` is neither text nor bytes.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise TypeError(f"parse_spec expects str, got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise SpecError(f"spec text is {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise SpecError("JSON is nested too deeply") from None
    if dom is not None and isinstance(data, dict):
        data.setdefault("dom", dom)
    return data
