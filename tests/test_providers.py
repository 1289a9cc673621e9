"""``provider:model`` strings for every LangChain provider: errors, structured output per provider, and real
OpenAI- and Anthropic-shaped round trips through ``Orchestra`` against llm-katan's echo server on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest

from mas_orchestra import OrchestraConfig, RunSettings
from mas_orchestra.errors import ConstrainedDecodingError, MissingExtraError
from mas_orchestra.models import MissingCredentialsError, resolve_model
from mas_orchestra.models.constraints import (
    PROVIDER_METADATA_KEY,
    ReplyConstraint,
    bind_constraint,
    structured_output_backend,
)
from mas_orchestra.models.providers import PROVIDERS
from mas_orchestra.models.resolve import UnknownModelError
from mas_orchestra.runtime import Orchestra, Status
from mas_orchestra.testing import ScriptedChatModel
from tests.test_server import FOUR_NODES, _katan_executable, free_port


def test_the_table_covers_every_provider_init_chat_model_knows():
    from langchain.chat_models.base import _BUILTIN_PROVIDERS

    assert set(_BUILTIN_PROVIDERS) - {"langsmith"} <= set(PROVIDERS)


@pytest.mark.parametrize(("typo", "meant"), [("antropic:claude-sonnet-4-5", "anthropic"), ("opneai:gpt-4o", "openai"),
                                             ("google_genia:gemini-2.0", "google_genai"), ("embeded", "embedded")])
def test_a_misspelt_provider_suggests_the_closest(typo, meant):
    with pytest.raises(UnknownModelError, match=f"did you mean '{meant}'") as err:
        resolve_model(typo)
    assert err.value.suggestion == meant and isinstance(err.value, ValueError)


def test_missing_integration_package_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain_anthropic", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'mas-orchestra\[anthropic\]'"):
        resolve_model("anthropic:claude-sonnet-4-5")
    monkeypatch.setitem(sys.modules, "langchain_groq", None)
    with pytest.raises(MissingExtraError, match="pip install langchain langchain-groq"):
        resolve_model("groq:llama-3.3-70b-versatile")


def test_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingCredentialsError, match="ANTHROPIC_API_KEY"):
        resolve_model("anthropic:claude-sonnet-4-5")


def test_anthropic_structured_output_is_a_forced_tool_call(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    model = resolve_model("anthropic:claude-sonnet-4-5", timeout=5)
    assert type(model).__name__ == "ChatAnthropic" and structured_output_backend(model) == "tools"
    bound = bind_constraint(model, ReplyConstraint())
    kwargs = bound.first.kwargs
    assert kwargs["tools"][0]["name"] == "mas_orchestra_reply"
    assert kwargs["tools"][0]["input_schema"]["required"] == ["thinking", "answer"]
    assert kwargs["tool_choice"] == {"type": "tool", "name": "mas_orchestra_reply"}


def test_the_forced_tool_call_is_read_back_as_json_text():
    from langchain_core.messages import AIMessage

    reply = AIMessage(content="", tool_calls=[{"name": "mas_orchestra_reply", "id": "t",
                                               "args": {"thinking": "t", "answer": "42"}}])
    model = ScriptedChatModel(replies=[reply], tool_calling=True, metadata={"mas_orchestra_backend": "tools"})
    text = bind_constraint(model, ReplyConstraint()).invoke("q").content
    assert text == '{"thinking": "t", "answer": "42"}'


def test_constrained_true_on_a_provider_without_structured_output_names_provider_and_switch():
    model = ScriptedChatModel(metadata={PROVIDER_METADATA_KEY: "perplexity"})
    with pytest.raises(ConstrainedDecodingError, match=r"provider 'perplexity'.*constrained=False"):
        Orchestra(model, model, config=OrchestraConfig(constrained=True))
    Orchestra(model, model, config=OrchestraConfig(constrained="auto"))  # falls back, with a logged warning


# -- real servers --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def katan(tmp_path_factory):
    executable = _katan_executable()
    if executable is None:
        pytest.skip("llm-katan is not installed")
    tmp, port = tmp_path_factory.mktemp("katan"), free_port()
    log = (tmp / "katan.log").open("wb")
    process = subprocess.Popen(
        [executable, "--backend", "echo", "-m", "echo-model", "--host", "127.0.0.1", "--port", str(port),
         "--providers", "openai,anthropic", "--max-concurrent", "16", "--disable-dashboard",
         "--stats-file", str(tmp / "stats.json"), "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail(f"llm-katan did not start: {(tmp / 'katan.log').read_text()[-1500:]}")
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _report(capsys, provider: str, outcome) -> None:
    u = outcome.usage
    with capsys.disabled():
        print(f"\n[providers] {provider}: status {outcome.status.value}, {u.subagent_calls} sub-agent calls, "
              f"{u.input_tokens} in / {u.output_tokens} out tokens, {u.wall_s:.2f} s")


@pytest.mark.server
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_round_trip_through_orchestra_counts_usage(katan, monkeypatch, capsys, provider):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{katan}/v1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", katan)
    # The anthropic SDK sends the key as a bearer token; llm-katan reads the x-api-key header.
    extra = {"default_headers": {"x-api-key": "sk-ant-test"}} if provider == "anthropic" else {}
    subagent = resolve_model(f"{provider}:echo-model", timeout=30, **extra)
    orchestrator = ScriptedChatModel(replies=[FOUR_NODES], model_name="scripted-orchestrator")
    outcome = Orchestra(orchestrator, subagent, settings=RunSettings(timeout=120)).run("What is 2 + 2?")
    _report(capsys, provider, outcome)
    assert outcome.status is Status.OK, outcome.error
    assert outcome.answer == "24"  # the echoed format block's worked-example answer
    assert outcome.usage.subagent_calls == 4
    assert outcome.usage.by_model["echo-model"].calls == 4
    assert outcome.usage.by_model["echo-model"].input_tokens > 0 and outcome.usage.by_model["echo-model"].output_tokens > 0
