"""A local-transformers LangChain chat model (:class:`HFChatModel`) and its factories.

:class:`HFChatModel` runs any local Hugging Face model folder as a LangChain chat model;
:func:`load_embedded_chat_model` runs the offline "embedded" default model, whose GGUF-to-HF
conversion and cache live in :mod:`mas_orchestra.models.embedded`.

Importing this module is cheap: ``torch`` and ``transformers`` are imported only inside
the functions that need them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

from mas_orchestra.models.embedded import SMOLLM2_CHAT_TEMPLATE, embedded_model_dir, require_torch_transformers
from mas_orchestra.models.packed_weights import decode_packed
from mas_orchestra.models.precision import resolve_prefill_dtype
from mas_orchestra.models.threads import default_torch_threads, torch_threads

logger = logging.getLogger(__name__)

__all__ = ["HFChatModel", "clear_loaded_models", "load_embedded_chat_model", "load_hf_chat_model"]

# --------------------------------------------------------------------------------------
# Loaded-model registry (weights shared by all HFChatModel objects on one path)
# --------------------------------------------------------------------------------------


@dataclass
class _LoadedModel:
    """A loaded model/tokenizer pair plus the lock that serialises its use."""

    model: Any
    tokenizer: Any
    path: str
    device: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    batcher: Any = None  # a GenerationBatcher, made on first batched call
    prefix_cache: Any = None  # its PrefixCache (one per loaded model: never shared across models)

    def get_batcher(self) -> Any:
        """The model's :class:`~mas_orchestra.models.batching.GenerationBatcher`, or ``None`` when its cache
        layout cannot be batched (e.g. sliding-window layers): generation then runs one call at a time."""
        with self.lock:
            if self.batcher is None:
                from transformers import DynamicCache

                from mas_orchestra.models.batching import GenerationBatcher, supports_batching
                from mas_orchestra.models.prefix_cache import PrefixCache, prefix_cache_bytes
                from mas_orchestra.models.prefix_store import PrefixStore, weights_fingerprint

                try:
                    batchable = supports_batching(DynamicCache(config=self.model.config))
                except (TypeError, ImportError):  # a transformers without per-layer caches (< 4.56)
                    batchable = False
                if not batchable:
                    logger.info("%s: cache layout not batchable; generating one call at a time", self.path)
                    self.batcher = False
                    return None
                identity = "|".join(
                    str(part) for part in (self.path, self.device, self.model.dtype, type(self.model).__name__,
                                           getattr(self.tokenizer, "name_or_path", ""), len(self.tokenizer))
                )
                self.prefix_cache = PrefixCache(identity, prefix_cache_bytes())
                store = PrefixStore(identity, weights_fingerprint(self.path))
                if store.enabled and self.prefix_cache.max_bytes > 0:
                    self.prefix_cache.persister = store
                    loaded = store.load_into(self.prefix_cache)
                    if loaded:
                        logger.info("%s: %d prompt prefix(es) loaded from %s", self.path, loaded, store.folder)
                end_ids = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id} | set(
                    _as_list(getattr(self.model.generation_config, "eos_token_id", None))
                )
                self.batcher = GenerationBatcher(self.model, self.tokenizer, self.device,
                                                 end_ids={int(i) for i in end_ids if i is not None},
                                                 prefix_cache=self.prefix_cache, identity=identity)
            return self.batcher or None


_LOADED: dict[tuple[str, str], _LoadedModel] = {}
_LOADED_LOCK = threading.Lock()


def _load_model(path: str, device: str) -> _LoadedModel:
    """Load (once per ``(path, device)``) a causal LM and its tokenizer."""
    key = (str(Path(path).expanduser().resolve()), device)
    with _LOADED_LOCK:
        bundle = _LOADED.get(key)
        if bundle is not None:
            return bundle
        if not Path(key[0]).exists():
            raise FileNotFoundError(f"model path does not exist: {path}")
        require_torch_transformers()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        t0 = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(key[0])
        if not getattr(tokenizer, "chat_template", None):
            logger.warning("%s has no chat template; using SmolLM2's ChatML template", path)
            tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model: Any = AutoModelForCausalLM.from_pretrained(key[0])
        model = model.to(device)
        model.eval()
        bundle = _LoadedModel(model=model, tokenizer=tokenizer, path=key[0], device=device)
        _LOADED[key] = bundle
        logger.info("loaded %s on %s in %.2fs", key[0], device, time.perf_counter() - t0)
        return bundle


def clear_loaded_models() -> None:
    """Forget all loaded models (e.g. after training wrote new weights to a path); their prefix caches go too."""
    with _LOADED_LOCK:
        for bundle in _LOADED.values():
            if bundle.prefix_cache is not None:
                bundle.prefix_cache.clear()
        _LOADED.clear()


# --------------------------------------------------------------------------------------
# LangChain chat model
# --------------------------------------------------------------------------------------

_ROLE_BY_TYPE = {
    SystemMessage: "system",
    HumanMessage: "user",
    AIMessage: "assistant",
    ToolMessage: "tool",
    FunctionMessage: "function",
}

_GEN_KWARGS = frozenset({"temperature", "top_p", "max_new_tokens", "max_tokens", "seed", "constraint"})


def _to_chat_dicts(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    """Convert LangChain messages to ``{"role", "content"}`` dicts for the chat template."""
    out = []
    for msg in messages:
        if isinstance(msg, ChatMessage):
            role = msg.role
        else:
            role = next((r for t, r in _ROLE_BY_TYPE.items() if isinstance(msg, t)), msg.type)
        out.append({"role": role, "content": str(msg.text)})
    return out


def _truncate_at_stop(text: str, stop: Sequence[str] | None) -> tuple[str, bool]:
    """Cut ``text`` at the earliest occurrence of any stop string."""
    if not stop:
        return text, False
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class HFChatModel(BaseChatModel):
    """LangChain chat model running a local Hugging Face causal LM with ``transformers``.

    Weights are loaded lazily on first use and shared by every ``HFChatModel`` on the
    same ``(model_path, device)``. Concurrent calls to one loaded model are decoded
    together in one batch (``batching=True``, see :mod:`mas_orchestra.models.batching`),
    reusing the key/values of a prompt prefix seen before (``prefix_caching=True``, see
    :mod:`mas_orchestra.models.prefix_cache`) and appending text a grammar forces in one
    forward pass (``jump_forward=True``); :meth:`ainvoke` waits without blocking the
    event loop, and cancelling it takes the request out of its batch.

    Per-call keyword arguments (``invoke(..., temperature=0)`` or ``.bind(...)``):
    ``temperature`` (``<= 0`` means greedy), ``top_p``, ``max_new_tokens`` (alias
    ``max_tokens``), ``seed`` (reproducible sampling without touching the global RNG) and
    ``constraint`` (an :class:`~mas_orchestra.models.constraints.OutputConstraint`: the reply is decoded under its
    grammar with xgrammar; ``top_p`` is then 1 so that no sampling filter can remove every allowed token).

    ``torch_threads`` sets torch's intra-op thread count for this model's generations only
    (restored afterwards); ``None`` uses :func:`~mas_orchestra.models.threads.default_torch_threads`
    (``MAS_TORCH_THREADS``, else ``OMP_NUM_THREADS``, else the cores this process may use divided
    by the processes per machine), ``0`` keeps torch's setting. On a small CPU shared with other
    busy processes, ``1`` avoids OpenMP oversubscription, which can slow the default
    (all cores) by an order of magnitude.

    ``prefill_precision`` (``auto`` | ``float32`` | ``bfloat16``; ``None``: ``MAS_PREFILL_DTYPE``, else
    ``auto``) picks the precision of batched prompt prefills: ``auto`` prefills long prompts of a float32
    model in bf16 on a CPU with native bf16 and decodes in float32 (:mod:`mas_orchestra.models.precision`);
    ``float32`` keeps every step bit-for-bit in the model's precision.

    ``decode_weights`` (``auto`` | ``float32`` | ``int4``; ``None``: ``MAS_DECODE_WEIGHTS``, else ``auto``) picks
    the weights batched decode steps read: ``auto`` reads a 4-bit model's linear layers (the embedded one) as
    int4 on a CPU with native bf16, about 2.3× the tokens per second of one sequence
    (:mod:`mas_orchestra.models.packed_weights`); ``float32`` keeps decode steps bit-for-bit; ``int4`` rounds any
    float32 model's layers to 4-bit (lossy).

    Seeded sampling (``seed=``) is reproducible: each request samples from its own generator, so
    the same seed gives the same reply whatever other requests share its batch (the tokens differ
    from ``batching=False``, which seeds torch's global generator for ``model.generate``).
    """

    model_path: str
    max_new_tokens: int = 256
    temperature: float = 0.5
    top_p: float = 0.95
    device: str = "cpu"
    torch_threads: int | None = None
    batching: bool = True
    prefix_caching: bool = True
    jump_forward: bool = True
    prefill_precision: str | None = None  # auto | float32 | bfloat16; None: MAS_PREFILL_DTYPE, else auto
    decode_weights: str | None = None  # auto | float32 | int4; None: MAS_DECODE_WEIGHTS, else auto

    _bundle: _LoadedModel | None = PrivateAttr(default=None)

    #: Replies can be decoded under a grammar (``constraint=`` per call); see :mod:`mas_orchestra.models.constraints`.
    supports_grammar_constraints: ClassVar[bool] = True

    @property
    def _llm_type(self) -> str:
        return "hf-transformers"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path,
            "model_name": self.model_name,
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "device": self.device,
        }

    @property
    def model_name(self) -> str:
        """Short model name (the model folder's name)."""
        return Path(self.model_path).name

    def _load(self) -> _LoadedModel:
        if self._bundle is None:
            self._bundle = _load_model(self.model_path, self.device)
        return self._bundle

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        prepared = self._prepare(messages, stop, kwargs)
        if not isinstance(prepared, tuple):
            return prepared
        bundle, future, constraint, processor = prepared
        text, n_in, n_out, finish, extra = self._finish_batched(bundle, future.result(), stop)
        return self._result(text, n_in, n_out, finish, extra, constraint, processor)

    def _prepare(self, messages: Sequence[BaseMessage], stop: Sequence[str] | None,
                 kwargs: dict[str, Any]) -> ChatResult | tuple[_LoadedModel, Any, Any, Any]:
        """Queue the call on the model's batcher (returns the bundle, the row's future, the constraint and its
        processor), or, without batching, generate it right away (returns the result)."""
        unknown = set(kwargs) - _GEN_KWARGS
        if unknown:
            logger.debug("HFChatModel ignores unsupported kwargs: %s", sorted(unknown))
        temperature = float(kwargs.get("temperature", self.temperature))
        top_p = float(kwargs.get("top_p", self.top_p))
        max_new = int(kwargs.get("max_new_tokens", kwargs.get("max_tokens", self.max_new_tokens)))
        seed = kwargs.get("seed")
        constraint = kwargs.get("constraint")
        bundle = self._load()
        processor = None
        if constraint is not None:
            from mas_orchestra.models.decoding import ConstrainedLogitsProcessor, grammar_compiler, stop_token_ids

            stops = stop_token_ids(bundle.model.generation_config.eos_token_id, bundle.tokenizer)
            compiler = grammar_compiler(bundle.tokenizer, int(bundle.model.config.vocab_size), stops)
            processor = ConstrainedLogitsProcessor(constraint, bundle.tokenizer, compiler, max_new_tokens=max_new)
            top_p = 1.0
        batcher = bundle.get_batcher() if self.batching else None
        if batcher is not None:
            future = self._submit(batcher, bundle, messages, stop, temperature, top_p, max_new, seed, processor)
            return bundle, future, constraint, processor
        text, n_in, n_out, finish = self._run(
            bundle, messages, stop, temperature, top_p, max_new, seed, processor=processor
        )
        return self._result(text, n_in, n_out, finish, {}, constraint, processor)

    def _result(self, text: str, n_in: int, n_out: int, finish: str, extra: dict[str, Any], constraint: Any,
                processor: Any) -> ChatResult:
        response_metadata: dict[str, Any] = {"model_name": self.model_name, "finish_reason": finish, **extra}
        if processor is not None and constraint is not None:
            response_metadata["constrained"] = {
                "constraint": constraint.name,
                "stage_switches": processor.stats.stage_switches,
                "closings": processor.stats.closings,
                "forced_tokens": processor.stats.forced_tokens,
                "mask_seconds": round(processor.stats.mask_seconds, 4),
            }
        message = AIMessage(
            content=text,
            usage_metadata={"input_tokens": n_in, "output_tokens": n_out, "total_tokens": n_in + n_out},
            response_metadata=response_metadata,
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _submit(self, batcher: Any, bundle: _LoadedModel, messages: Sequence[BaseMessage],
                stop: Sequence[str] | None, temperature: float, top_p: float, max_new: int, seed: int | None,
                processor: Any) -> Any:
        """Queue one request on the model's batcher; returns its future."""
        from mas_orchestra.models.batching import GenerationRequest

        enc = bundle.tokenizer.apply_chat_template(
            _to_chat_dicts(messages), add_generation_prompt=True, return_dict=True, return_tensors="pt"
        )
        threads = default_torch_threads() if self.torch_threads is None else (self.torch_threads or None)
        request = GenerationRequest(
            input_ids=enc["input_ids"], max_new_tokens=max_new, temperature=temperature, top_p=top_p,
            seed=None if seed is None else int(seed), stop_strings=tuple(s for s in (stop or []) if s),
            processor=processor, use_prefix_cache=self.prefix_caching, jump_forward=self.jump_forward,
            prefill_dtype=resolve_prefill_dtype(bundle.device, bundle.model.dtype, self.prefill_precision),
            packed=decode_packed(bundle.model, bundle.device, self.decode_weights), threads=threads,
        )
        return batcher.submit(request)

    def _finish_batched(self, bundle: _LoadedModel, result: Any, stop: Sequence[str] | None
                        ) -> tuple[str, int, int, str, dict[str, Any]]:
        """The reply text, token counts, finish reason and batching metadata of a batched row."""
        text = bundle.tokenizer.decode(result.token_ids, skip_special_tokens=True)
        text, stopped = _truncate_at_stop(text, [s for s in (stop or []) if s])
        finish = "stop" if stopped else result.finish_reason
        extra = {"cached_prompt_tokens": result.cached_prompt_tokens, "forward_passes": result.forward_passes}
        return text, int(result.prompt_tokens), len(result.token_ids), finish, extra

    def _run(
        self,
        bundle: _LoadedModel,
        messages: Sequence[BaseMessage],
        stop: Sequence[str] | None,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int | None,
        *,
        processor: Any = None,
    ) -> tuple[str, int, int, str]:
        """Generate under the model lock; returns (text, input, output tokens, finish reason)."""
        import torch

        tok, model = bundle.tokenizer, bundle.model
        gen: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": tok.pad_token_id}
        if temperature > 0:
            gen.update(do_sample=True, temperature=temperature, top_p=top_p)
        else:
            gen.update(do_sample=False)
        if processor is not None:
            from transformers import LogitsProcessorList

            gen["logits_processor"] = LogitsProcessorList([processor])
        stops = [s for s in (stop or []) if s]
        if stops:
            gen.update(stop_strings=stops, tokenizer=tok)
        threads = default_torch_threads() if self.torch_threads is None else self.torch_threads
        with bundle.lock, torch_threads(threads):  # one request at a time per model
            enc = tok.apply_chat_template(
                _to_chat_dicts(messages), add_generation_prompt=True, return_dict=True, return_tensors="pt"
            )
            enc = {k: v.to(bundle.device) for k, v in enc.items()}
            rng = (
                torch.random.fork_rng(devices=[] if bundle.device == "cpu" else None)
                if seed is not None
                else contextlib.nullcontext()
            )
            with rng, torch.inference_mode():
                if seed is not None:
                    torch.manual_seed(int(seed))
                out = model.generate(**enc, **gen)
            n_in = int(enc["input_ids"].shape[1])
            new_ids = out[0, n_in:].tolist()
            end_ids = {tok.eos_token_id, tok.pad_token_id} | set(
                _as_list(getattr(model.generation_config, "eos_token_id", None))
            )
            hit_eos = bool(new_ids) and new_ids[-1] in end_ids
            while new_ids and new_ids[-1] in end_ids:
                new_ids.pop()
            text = tok.decode(new_ids, skip_special_tokens=True)
        text, stopped = _truncate_at_stop(text, stops)
        finish = "stop" if (hit_eos or stopped) else "length"
        return text, n_in, len(new_ids), finish

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if not self.batching:
            return await asyncio.to_thread(self._generate, messages, stop, None, **kwargs)
        # Queue on the batcher from a worker thread (loading and templating block), then await the row's
        # future: cancelling this coroutine (e.g. a time-out) cancels the future, which takes the row out
        # of its batch at the next step.
        prepared = await asyncio.to_thread(self._prepare, messages, stop, kwargs)
        if not isinstance(prepared, tuple):
            return prepared  # no batcher for this model: generated one call at a time
        bundle, future, constraint, processor = prepared
        result = await asyncio.wrap_future(future)
        text, n_in, n_out, finish, extra = self._finish_batched(bundle, result, stop)
        return self._result(text, n_in, n_out, finish, extra, constraint, processor)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple, set)) else [value]


# --------------------------------------------------------------------------------------
# Factories
# --------------------------------------------------------------------------------------


def load_hf_chat_model(path: str | Path, **kwargs: Any) -> HFChatModel:
    """Chat model over any local Hugging Face model folder (weights load on first call).

    Args:
        path: The model folder.
        **kwargs: :class:`HFChatModel` fields (``temperature``, ``max_new_tokens``, ...).

    Returns:
        The chat model.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    resolved = Path(path).expanduser()
    if not resolved.exists():
        raise FileNotFoundError(f"model path does not exist: {path}")
    return HFChatModel(model_path=str(resolved), **kwargs)


def load_embedded_chat_model(*, cache_dir: str | Path | None = None, **kwargs: Any) -> HFChatModel:
    """Chat model over the embedded SmolLM2-135M-Instruct (converted on first use).

    Args:
        cache_dir: Where the converted copy lives (see :func:`embedded_model_dir`).
        **kwargs: :class:`HFChatModel` fields (``temperature``, ``max_new_tokens``, ...).

    Returns:
        The chat model.

    Raises:
        EmbeddedModelUnavailableError: A package the embedded model needs is missing (the fix is named).
    """
    return HFChatModel(model_path=str(embedded_model_dir(cache_dir)), **kwargs)
