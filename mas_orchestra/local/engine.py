"""The local engine's entry point: a loaded model (:class:`LocalEngine`) and its one generation path.

:func:`load_engine` loads a Hugging Face model folder once per ``(path, device)``; every caller on that pair
shares the weights, the :class:`~mas_orchestra.local.batching.GenerationBatcher` and the prefix cache.
:meth:`LocalEngine.submit` is the only way a chat turn is generated: it applies the chat template, builds the
row's grammar processor, resolves the :class:`~mas_orchestra.local.options.LocalEngineOptions` of the call and
queues the row on the batcher; :class:`PendingReply` turns the finished row into text. Models with full or
sliding-window attention layers are decoded this way (the window is kept by the attention mask); a model with
other cache layers (linear attention, state-space) raises
:class:`~mas_orchestra.local.batching.UnsupportedCacheError` on its first call.

Imports torch and transformers lazily (when a model is loaded).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mas_orchestra.local.embedded import SMOLLM2_CHAT_TEMPLATE, require_torch_transformers
from mas_orchestra.local.options import LocalEngineOptions
from mas_orchestra.local.precision import bound_kernel_caches

__all__ = ["LocalEngine", "LocalReply", "PendingReply", "Sampling", "clear_loaded_models", "load_engine"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sampling:
    """How one call continues its prompt.

    Attributes:
        max_new_tokens: Token budget of the reply.
        temperature: ``<= 0`` means greedy.
        top_p: Nucleus sampling (1 when a constraint is given: no filter may remove every allowed token).
        seed: Reproducible sampling from the row's own generator (whatever shares its batch).
        stop: Stop strings; the reply is cut before the first.
        constraint: An :class:`~mas_orchestra.models.constraints.OutputConstraint` to decode under.
    """

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    constraint: Any = None


@dataclass
class LocalReply:
    """A finished reply: text, token counts, why it ended, and what the engine did for it.

    Attributes:
        text: The reply (cut at the first stop string).
        prompt_tokens: Tokens of the prompt.
        output_tokens: Tokens generated.
        finish_reason: ``stop`` (end of text, stop string, grammar end) or ``length``.
        cached_prompt_tokens: Prompt tokens taken from the prefix cache.
        forward_passes: Forward passes the row took part in.
        constrained: The grammar's counters, when a constraint was given.
    """

    text: str
    prompt_tokens: int
    output_tokens: int
    finish_reason: str
    cached_prompt_tokens: int = 0
    forward_passes: int = 0
    constrained: dict[str, Any] | None = None


class PendingReply:
    """A queued call: :meth:`result` blocks, :meth:`wait` awaits (cancelling it takes the row out of its batch).

    Args:
        engine: The engine running the call.
        future: The row's future.
        stop: Stop strings the reply is cut at.
        processor: The row's constrained logits processor, or ``None``.
    """

    def __init__(self, engine: LocalEngine, future: Future[Any], stop: tuple[str, ...], processor: Any) -> None:
        self._engine, self.future, self._stop, self._processor = engine, future, stop, processor

    def result(self) -> LocalReply:
        """Block until the row is done; returns its reply (or raises the row's error)."""
        return self._reply(self.future.result())

    async def wait(self) -> LocalReply:
        """Await the row without blocking the event loop; returns its reply (or raises the row's error)."""
        return self._reply(await asyncio.wrap_future(self.future))

    def _reply(self, result: Any) -> LocalReply:
        text = self._engine.tokenizer.decode(result.token_ids, skip_special_tokens=True)
        text, stopped = truncate_at_stop(text, self._stop)
        constrained = None
        if self._processor is not None:
            stats = self._processor.stats
            constrained = {"constraint": self._processor.constraint.name, "stage_switches": stats.stage_switches,
                           "closings": stats.closings, "forced_tokens": stats.forced_tokens,
                           "mask_seconds": round(stats.mask_seconds, 4)}
        return LocalReply(text=text, prompt_tokens=int(result.prompt_tokens), output_tokens=len(result.token_ids),
                          finish_reason="stop" if stopped else result.finish_reason,
                          cached_prompt_tokens=result.cached_prompt_tokens, forward_passes=result.forward_passes,
                          constrained=constrained)


def truncate_at_stop(text: str, stop: tuple[str, ...] | list[str]) -> tuple[str, bool]:
    """Cut ``text`` at the earliest occurrence of any stop string; returns the text and whether it was cut.

    Args:
        text: The text.
        stop: The stop strings (empty ones are ignored).
    """
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


@dataclass
class LocalEngine:
    """One loaded model and tokenizer, with the batcher and prefix cache of every call to it.

    Attributes:
        model: The transformers causal LM (eval mode).
        tokenizer: Its tokenizer (with a chat template and a pad token).
        path: The resolved model folder.
        device: Where it runs.
        lock: Serialises making the batcher.
        batcher: The :class:`~mas_orchestra.local.batching.GenerationBatcher`, made on the first call.
        prefix_cache: Its :class:`~mas_orchestra.local.prefix_cache.PrefixCache` (one per loaded model).
    """

    model: Any
    tokenizer: Any
    path: str
    device: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    batcher: Any = None
    prefix_cache: Any = None

    def submit(self, chat: list[dict[str, str]], sampling: Sampling, options: LocalEngineOptions) -> PendingReply:
        """Queue one chat turn (``{"role", "content"}`` messages) for generation; the one generation path.

        Args:
            chat: The conversation so far; the reply continues it (the chat template's generation prompt).
            sampling: How to continue it.
            options: The engine options of this call (per-model budgets are fixed by the first call's).

        Returns:
            The pending reply.
        """
        from mas_orchestra.local.batching import GenerationRequest

        processor = None
        top_p = sampling.top_p
        if sampling.constraint is not None:
            from mas_orchestra.local.decoding import ConstrainedLogitsProcessor, grammar_compiler, stop_token_ids

            stops = stop_token_ids(self.model.generation_config.eos_token_id, self.tokenizer)
            compiler = grammar_compiler(self.tokenizer, int(self.model.config.vocab_size), stops)
            processor = ConstrainedLogitsProcessor(sampling.constraint, self.tokenizer, compiler,
                                                   max_new_tokens=sampling.max_new_tokens)
            top_p = 1.0
        batcher = self.get_batcher(options)
        enc = self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=True,
                                                 return_tensors="pt")
        stop = tuple(s for s in sampling.stop if s)
        request = GenerationRequest(
            input_ids=enc["input_ids"], max_new_tokens=sampling.max_new_tokens, temperature=sampling.temperature,
            top_p=top_p, seed=None if sampling.seed is None else int(sampling.seed), stop_strings=stop,
            processor=processor, use_prefix_cache=options.prefix_caching, jump_forward=options.jump_forward,
            prefill_dtype=options.prefill_dtype(self.device, self.model.dtype),
            packed=options.packed(self.model, self.device),
            threads=options.threads(),
        )
        return PendingReply(self, batcher.submit(request), stop, processor)

    def get_batcher(self, options: LocalEngineOptions) -> Any:
        """The model's batcher, made on first use with that call's per-model options.

        Args:
            options: The options of the first call (cache budgets, store, batch size); later calls reuse the batcher.

        Returns:
            The :class:`~mas_orchestra.local.batching.GenerationBatcher`.

        Raises:
            UnsupportedCacheError: The model's cache layers are neither full nor sliding-window key/values.
        """
        with self.lock:
            if self.batcher is not None:
                return self.batcher
            from transformers import DynamicCache

            from mas_orchestra.local.batching import GenerationBatcher, UnsupportedCacheError, supports_batching
            from mas_orchestra.local.prefix_cache import PrefixCache
            from mas_orchestra.local.prefix_store import PrefixStore, weights_fingerprint

            layout = DynamicCache(config=self.model.config)
            if not supports_batching(layout):
                kinds = sorted({type(layer).__name__ for layer in getattr(layout, "layers", [])}) or ["none"]
                raise UnsupportedCacheError(
                    f"{self.path}: the local engine decodes models whose cache layers are full or sliding-window "
                    f"key/values; this model's are {', '.join(kinds)}; serve it with vLLM (a vllm: model string)")
            identity = "|".join(
                str(part) for part in (self.path, self.device, self.model.dtype, type(self.model).__name__,
                                       getattr(self.tokenizer, "name_or_path", ""), len(self.tokenizer))
            )
            self.prefix_cache = PrefixCache(identity, options.prefix_cache_bytes())
            store = PrefixStore(identity, weights_fingerprint(self.path), root=options.prefix_store_dir,
                                max_bytes=options.prefix_store_bytes())
            if store.enabled and self.prefix_cache.max_bytes > 0:
                self.prefix_cache.persister = store
                loaded = store.load_into(self.prefix_cache)
                if loaded:
                    log.info("%s: %d prompt prefix(es) loaded from %s", self.path, loaded, store.folder)
            end_ids = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id} | set(
                _as_list(getattr(self.model.generation_config, "eos_token_id", None))
            )
            self.batcher = GenerationBatcher(self.model, self.tokenizer, self.device,
                                             end_ids={int(i) for i in end_ids if i is not None},
                                             prefix_cache=self.prefix_cache, identity=identity,
                                             max_batch=options.max_batch, layout=options.batch_layout)
            return self.batcher


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple, set)) else [value]


_LOADED: dict[tuple[str, str], LocalEngine] = {}
_LOADED_LOCK = threading.Lock()


def load_engine(path: str | Path, device: str = "cpu") -> LocalEngine:
    """The engine of a causal LM folder on ``device``, loaded once per ``(path, device)``.

    Args:
        path: The model folder.
        device: Where it runs.

    Returns:
        The shared engine.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    key = (str(Path(path).expanduser().resolve()), device)
    with _LOADED_LOCK:
        engine = _LOADED.get(key)
        if engine is not None:
            return engine
        if not Path(key[0]).exists():
            raise FileNotFoundError(f"model path does not exist: {path}")
        require_torch_transformers()
        # Before the first bf16 product: prompts of many lengths are prefilled in bf16, and each new length
        # would add a kernel to caches that keep 1024 entries unless bounded.
        bound_kernel_caches()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        t0 = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(key[0])
        if not getattr(tokenizer, "chat_template", None):
            log.warning("%s has no chat template; using SmolLM2's ChatML template", path)
            tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model: Any = AutoModelForCausalLM.from_pretrained(key[0])
        model = model.to(device)
        model.eval()
        engine = LocalEngine(model=model, tokenizer=tokenizer, path=key[0], device=device)
        _LOADED[key] = engine
        log.info("loaded %s on %s in %.2fs", key[0], device, time.perf_counter() - t0)
        return engine


def clear_loaded_models() -> None:
    """Forget all loaded models (e.g. after training wrote new weights to a path); their prefix caches go too."""
    with _LOADED_LOCK:
        for engine in _LOADED.values():
            if engine.prefix_cache is not None:
                engine.prefix_cache.clear()
        _LOADED.clear()
