"""Orchestrator prompt templates: ours by default, any folder by choice, the original's via the converter."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mas_orchestra import OrchestraConfig
from mas_orchestra.prompt_templates import PromptTemplateError, load_template
from mas_orchestra.prompts import archive_kinds, orchestrator_messages, orchestrator_prompt
from mas_orchestra.registry import default_registry

ROOT = Path(__file__).parents[1]
ORIGINAL = Path(__file__).parent / "fixtures" / "original_prompts"
_spec = importlib.util.spec_from_file_location("convert_original_prompts", ROOT / "scripts" / "convert_original_prompts.py")
assert _spec is not None and _spec.loader is not None
converter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(converter)


def write(folder: Path, system: str = "", user: str = "Task: {question}", second: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("system.txt", system), ("user.txt", user), ("second_user.txt", second)):
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.mark.parametrize("dom", ["high", "low"])
def test_our_template_is_one_user_message_ending_with_the_question(dom):
    messages = orchestrator_messages("What is 6 x 7?", dom)
    assert [m["role"] for m in messages] == ["user"]
    text = messages[0]["content"]
    assert text.rstrip().endswith("# Task\nWhat is 6 x 7?")
    assert ("${AGENT_ID}" in text) == (dom == "high")  # the $-reference survives the template syntax
    assert "{" + "agents}" not in text and "CoTAgent" in text
    assert orchestrator_prompt("What is 6 x 7?", dom) == text


def test_folder_template_three_messages_and_archive_order(tmp_path):
    folder = write(tmp_path / "t", system="Sub-agents: {model}.", user="{archive}\n{{question}} is literal; ${X} too",
                   second="Q: {question}\nCoT: {agent_cot}")
    messages = orchestrator_messages("Q1", "high", prompt=str(folder), model="gpt-oss-120b")
    assert [m["role"] for m in messages] == ["system", "user", "user"]
    assert messages[0]["content"] == "Sub-agents: gpt-oss-120b."
    archive = json.loads(messages[1]["content"].split("\n{question}")[0])
    assert [a["name"] for a in archive] == ["CoTAgent", "SCAgent", "ReflexionAgent", "DebateAgent", "WebSearchAgent"]
    assert "{question} is literal; ${X} too" in messages[1]["content"]
    assert json.loads(messages[2]["content"].split("CoT: ")[1])["name"] == "CoTAgent"
    assert [k.name for k in archive_kinds(default_registry)] == ["cot", "sc", "reflexion", "debate", "search"]


def test_dom_subfolder_is_chosen(tmp_path):
    write(tmp_path / "high", user="HIGH {question}")
    write(tmp_path / "low", user="LOW {question}")
    assert orchestrator_prompt("q", "low", prompt=str(tmp_path)) == "LOW q"
    assert orchestrator_prompt("q", "high", prompt=str(tmp_path)) == "HIGH q"


def test_bad_template_folders_name_the_file_and_placeholder(tmp_path):
    folder = write(tmp_path / "missing")
    (folder / "second_user.txt").unlink()
    with pytest.raises(PromptTemplateError, match=r"missing part second_user\.txt"):
        load_template(folder)
    folder = write(tmp_path / "unknown", second="Agents: {agent_list}")
    with pytest.raises(PromptTemplateError, match=r"second_user.txt: unknown placeholder \{agent_list\} at line 1") as info:
        load_template(folder)
    assert info.value.placeholder == "agent_list"
    with pytest.raises(PromptTemplateError, match=r"no part uses \{question\}"):
        load_template(write(tmp_path / "noq", user="Solve it."))
    with pytest.raises(PromptTemplateError, match="not a folder"):
        load_template(tmp_path / "nowhere")


def test_orchestra_sends_the_template_messages(tmp_path):
    from langchain_core.messages import SystemMessage

    from mas_orchestra import Orchestra
    from mas_orchestra.testing import ScriptedChatModel

    sent: list = []

    def reply(messages, index):
        sent.append(list(messages))
        return "<answer>42</answer>"

    orchestrator = ScriptedChatModel(replies=reply)
    folder = write(tmp_path / "t", system="Plan agents.", user="Task: {question}")
    orchestra = Orchestra(orchestrator, ScriptedChatModel(),
                          config=OrchestraConfig(dom="low", prompt=str(folder), constrained=False))
    out = orchestra.run("6 x 7?")
    assert out.answer == "42"
    assert isinstance(sent[0][0], SystemMessage) and sent[0][0].content == "Plan agents."
    assert sent[0][1].content == "Task: 6 x 7?" and len(sent[0]) == 2
    with pytest.raises(PromptTemplateError):
        Orchestra(orchestrator, ScriptedChatModel(), config=OrchestraConfig(prompt=str(tmp_path / "nowhere")))


def test_converter_reads_constants_without_executing(tmp_path, monkeypatch):
    monkeypatch.setenv("NEVER_READ", "leaked")
    written = converter.convert(ORIGINAL, tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in written) == [
        "high/second_user.txt", "high/system.txt", "high/user.txt",
        "low/second_user.txt", "low/system.txt", "low/user.txt",
    ]
    user = (tmp_path / "out" / "high" / "user.txt").read_text()
    assert "{archive}" in user and "{question}" in user and 'Example: ""' in user
    assert "{{placeholder}}" in user and "${AGENT_ID}" in user and '{"a": 1}' in user and "leaked" not in user
    messages = orchestrator_messages("Q?", "high", prompt=str(tmp_path / "out"), model="m1")
    assert [m["role"] for m in messages] == ["system", "user", "user"]
    assert "Sub-agents run on m1." in messages[0]["content"]
    assert "a literal {placeholder} stays text" in messages[1]["content"] and messages[1]["content"].endswith("Task: Q?")
    assert json.loads(messages[2]["content"].split("WebSearchAgent: ")[1])["name"] == "WebSearchAgent"
    low = orchestrator_messages("Q?", "low", prompt=str(tmp_path / "out"), model="m1")
    assert low[1]["content"].endswith("Task: Q?") and "ReflexionAgent: {" in low[2]["content"]


def test_converter_errors_name_the_module(tmp_path):
    bad = tmp_path / "repo" / "system_prompt"
    bad.mkdir(parents=True)
    (bad / "harmony_medium.py").write_text("system_prompt = make_prompt()\n")
    with pytest.raises(converter.ConversionError, match=r"harmony_medium.py: system_prompt is not a plain string"):
        converter.convert(tmp_path / "repo", tmp_path / "out")
    assert converter.main([str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
