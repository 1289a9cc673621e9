"""Model strings: resolution, clear errors for missing keys / extras / bad forms, retry policy."""

from __future__ import annotations

import sys
import types

import pytest

from mas_orchestra.errors import MissingExtraError
from mas_orchestra.models import (
    MissingCredentialsError,
    TransientModelError,
    is_transient,
    resolve_model,
    with_transient_retry,
)
from mas_orchestra.testing import ScriptedChatModel


def test_runnables_pass_through():
    model = ScriptedChatModel()
    assert resolve_model(model) is model


def test_unknown_string_lists_valid_forms():
    with pytest.raises(ValueError, match=r"unknown model 'gpt9'; valid forms: embedded, hf:<path>, <provider>:<model>"):
        resolve_model("gpt9")


def test_wrong_type_raises_type_error():
    with pytest.raises(TypeError):
        resolve_model(3.14)


def test_missing_api_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingCredentialsError, match="OPENAI_API_KEY"):
        resolve_model("openai:gpt-4o-mini")


def test_missing_extra_gives_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain_together", None)  # import fails as if not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'mas-orchestra\[together\]'"):
        resolve_model("together:meta-llama/Llama-3.3-70B-Instruct-Turbo")


def test_vllm_string_builds_an_openai_compatible_client():
    model = resolve_model("vllm:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000", timeout=5, requests_per_second=2)
    assert model.model_name == "Qwen/Qwen2.5-7B-Instruct"
    assert str(model.openai_api_base).endswith("/v1")
    assert model.max_retries == 0 and model.rate_limiter is not None
    with pytest.raises(ValueError, match="vllm:<model>@<base-url>"):
        resolve_model("vllm:@http://x")


def test_openai_string_uses_init_chat_model(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    model = resolve_model("openai:gpt-4o-mini", timeout=3)
    assert type(model).__name__ == "ChatOpenAI" and model.model_name == "gpt-4o-mini" and model.max_retries == 0


def test_python_strings(monkeypatch):
    module = types.ModuleType("user_models")
    module.ready = ScriptedChatModel(model_name="ready")
    module.factory = lambda: ScriptedChatModel(model_name="made")
    module.not_a_model = 5
    monkeypatch.setitem(sys.modules, "user_models", module)
    assert resolve_model("python:user_models:ready") is module.ready
    assert resolve_model("python:user_models:factory").model_name == "made"
    with pytest.raises(TypeError, match="not a chat model"):
        resolve_model("python:user_models:not_a_model")
    with pytest.raises(ValueError, match="cannot import 'missing'"):
        resolve_model("python:user_models:missing")


def test_scripted_string():
    assert resolve_model("scripted:7").invoke("q").content == "<thinking>scripted</thinking><answer>7</answer>"


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (TimeoutError(), True), (ConnectionError(), True), (TransientModelError("busy"), True),
        (ValueError("bad request"), False), (KeyError("x"), False),
        (type("APIStatusError", (Exception,), {"status_code": 503})(), True),
        (type("APIStatusError", (Exception,), {"status_code": 429})(), True),
        (type("APIStatusError", (Exception,), {"status_code": 400})(), False),
        (type("RateLimitError", (Exception,), {})(), True),
    ],
)
def test_transient_classification(exc, transient):
    assert is_transient(exc) is transient


def test_retry_wrapper_recovers_and_gives_up():
    flaky = ScriptedChatModel(replies=[ConnectionError(), ConnectionError(), "fine"], cycle=False)
    assert with_transient_retry(flaky, 3, initial_delay=0.001).invoke("q").content == "fine"
    dead = ScriptedChatModel(replies=[ConnectionError("down")])
    with pytest.raises(ConnectionError):
        with_transient_retry(dead, 2, initial_delay=0.001).invoke("q")
    assert dead.calls == 3
