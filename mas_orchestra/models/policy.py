"""Which model strings a request may name: the servers' consent for models that come from outside.

A server (the studio, the graphs served by ``langgraph.json``) gets model strings from requests, and a model
string is more than a name: ``<provider>:<model>`` spends the server's API key, ``python:`` imports code,
``hf:<path>`` loads a directory of the server's disk, and ``vllm:<model>@<url>`` sends prompts (and
``$VLLM_API_KEY``) to any URL. :class:`ModelPolicy` accepts a request's model string only when it matches one
of the server's patterns and, for the forms that reach outside the process, the server was started to allow it.
:func:`keyless` builds a ``vllm:`` model of a request without the server's key.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from mas_orchestra import environment
from mas_orchestra.errors import MasOrchestraError

__all__ = ["BASE_MODEL_PATTERNS", "ModelNotAllowedError", "ModelPolicy", "is_loopback_host", "keyless"]

#: Model strings any request may name: the local embedded model and scripted replies.
BASE_MODEL_PATTERNS = ("embedded", "scripted:*")
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class ModelNotAllowedError(MasOrchestraError, ValueError):
    """A request named a model string the server was not started to allow; the message says how to allow it."""


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this machine's loopback.

    Args:
        host: The host name or address.
    """
    name = host.strip().strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _own_models() -> list[str]:
    return [m for m in (environment.raw(n) for n in ("MAS_ORCHESTRATOR", "MAS_SUBAGENT")) if m]


@dataclass(frozen=True)
class ModelPolicy:
    """Which model strings a request may name.

    A string is accepted when it matches one of ``patterns`` (``fnmatch`` style, case-sensitive) and, for the
    forms that reach outside the process, its flag is on: ``python:`` (``allow_python_models``; a pattern
    naming one exact ``python:`` string, like the studio's demo, also allows it), ``vllm:`` with a URL off this
    machine (``allow_remote_vllm``), ``hf:<path>`` (``allow_hf_paths``).

    Attributes:
        patterns: accepted model strings; by default :data:`BASE_MODEL_PATTERNS` and the server's own
            models (``$MAS_ORCHESTRATOR``, ``$MAS_SUBAGENT``).
        allow_python_models: accept any ``python:<module>:<attr>``.
        allow_remote_vllm: accept ``vllm:`` URLs off loopback.
        allow_hf_paths: accept ``hf:<path>``.
        hints: how to allow each refused kind (``pattern``, ``python``, ``vllm``, ``hf``), for the messages;
            by default the studio's flags.
    """

    patterns: tuple[str, ...] = field(default_factory=lambda: ModelPolicy.default_patterns())
    allow_python_models: bool = False
    allow_remote_vllm: bool = False
    allow_hf_paths: bool = False
    hints: Mapping[str, str] = field(default_factory=lambda: {
        "pattern": "--allow-model '{model}' (or a pattern such as '{prefix}:*')",
        "python": "--allow-python-models", "vllm": "--allow-remote-vllm", "hf": "--allow-hf-paths"})

    @staticmethod
    def default_patterns(extra: Iterable[str] = ()) -> tuple[str, ...]:
        """:data:`BASE_MODEL_PATTERNS`, the server's own default models from the environment, then ``extra``.

        Args:
            extra: More patterns (duplicates are dropped).
        """
        return tuple(dict.fromkeys([*BASE_MODEL_PATTERNS, *_own_models(), *extra]))

    @classmethod
    def with_extra(cls, extra: Iterable[str] = (), **options: Any) -> ModelPolicy:
        """The default patterns plus ``extra`` (e.g. the ``--allow-model`` patterns), with ``options``.

        Args:
            extra: More patterns.
            **options: The policy's other fields (``allow_python_models`` …).
        """
        return cls(patterns=cls.default_patterns(extra), **options)

    def check(self, role: str, model: str) -> None:
        """Accept ``model`` for ``role`` or raise.

        Args:
            role: Whose model it is (``orchestrator``, ``subagent`` …), for the message.
            model: The model string.

        Raises:
            ModelNotAllowedError: naming the model and how to allow it.
        """
        text = model.strip()
        prefix = text.partition(":")[0].lower()
        hint = self.hints
        if prefix == "python":
            if self.allow_python_models or text in self.patterns:
                return
            raise ModelNotAllowedError(f"{role} model {model!r}: python: model strings import code, so they are "
                                       f"accepted only with {hint['python']}")
        if not any(fnmatch.fnmatchcase(text, pattern) for pattern in self.patterns):
            how = hint["pattern"].format(model=text, prefix=prefix)
            raise ModelNotAllowedError(f"{role} model {model!r} is not allowed here (accepted: "
                                       f"{', '.join(self.patterns)}); allow it with {how}")
        if prefix == "hf" and not self.allow_hf_paths:
            raise ModelNotAllowedError(f"{role} model {model!r}: hf: loads a model from a path on this machine; "
                                       f"allow request-given paths with {hint['hf']}")
        if prefix == "vllm":
            url = text.rpartition("@")[2]
            host = urlsplit(url if "//" in url else f"http://{url}").hostname or ""
            if not is_loopback_host(host) and not self.allow_remote_vllm:
                raise ModelNotAllowedError(
                    f"{role} model {model!r}: the vLLM server {host or url!r} is not on this machine and would get "
                    f"the prompts; allow it with {hint['vllm']}")


def keyless(model: str, timeout: float | None = None) -> Any:
    """A request's model string as an Orchestra takes it: a ``vllm:`` one is built here with no API key
    (``$VLLM_API_KEY`` never goes to a URL a request chose); any other is returned as it is.

    Args:
        model: The request's model string.
        timeout: Request timeout in seconds of a ``vllm:`` model.
    """
    if model.strip().lower().startswith("vllm:"):
        from mas_orchestra.models.resolve import resolve_model

        return resolve_model(model, timeout=timeout, api_key="EMPTY")
    return model
