"""Batched local generation: concurrent requests to one loaded model decode together, step by step.

One :class:`GenerationBatcher` per loaded model runs a worker thread. Requests (a prompt's token ids plus their
sampling settings, stop strings and an optional grammar processor) are queued; at every decode step the worker
admits what arrived — each new request is prefilled on its own (reusing a cached prompt prefix, see
:mod:`mas_orchestra.local.prefix_cache`) and its key/values joined to the running batch — then runs one forward
pass for all rows. The batch's layout is ragged where the model allows it (:mod:`mas_orchestra.local.ragged`: the
rows' real tokens only, a shared prompt prefix held once) and padded otherwise
(:mod:`mas_orchestra.local.batch_cache`: rows left-padded to a common width); ``batch_layout`` chooses. Rows
leave the batch as soon as they finish (end of text, stop string, token
budget, grammar end), are cancelled (their future was cancelled, e.g. a time-out) or fail (their grammar allowed
no token): a row's failure is its own, the others go on.

Each row keeps its own sampling state: temperature, top-p, a ``torch.Generator`` seeded with the request's seed
(so a seeded request samples the same tokens whatever else shares its batch) and its own grammar processor.
Text the grammar forces is appended in the same forward pass (jump-forward decoding, see
:meth:`~mas_orchestra.local.decoding.ConstrainedLogitsProcessor.jump_forward`).

Why not transformers' continuous batching (``generate_batch``): its logits processors are per-batch tensors
keyed by a fixed set of supported kinds; a stateful per-row grammar matcher that needs the row's token history,
switches grammars mid-row and appends forced runs has no place there, and its paged cache targets GPUs.

Imports torch lazily (only the worker and :meth:`GenerationBatcher.submit` need it).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import queue
import threading
import weakref
from concurrent.futures import Future, InvalidStateError, wait
from dataclasses import dataclass, field
from typing import Any

from mas_orchestra import environment
from mas_orchestra.errors import GrammarError, MasOrchestraError
from mas_orchestra.local.packed_weights import packed_decoding
from mas_orchestra.local.precision import MIN_BF16_PREFILL_TOKENS, cast_cache, prefill_autocast
from mas_orchestra.local.threads import torch_threads

__all__ = [
    "BATCH_LAYOUTS",
    "BATCH_LAYOUT_ENV_VAR",
    "FORCE_GQA_ENV_VAR",
    "BatchLayoutError",
    "BatchingError",
    "GenerationBatcher",
    "GenerationRequest",
    "GenerationResult",
    "UnsupportedCacheError",
    "prefer_grouped_query_attention",
    "resolve_batch_layout",
    "supports_batching",
]

log = logging.getLogger(__name__)

#: Rows decoded together at most; further requests wait for a row to leave.
DEFAULT_MAX_BATCH = 16
#: How a batch lays out its rows: ``ragged`` (:mod:`mas_orchestra.local.ragged`), ``padded``
#: (:mod:`mas_orchestra.local.batch_cache`), or ``auto`` (ragged where the model supports it).
BATCH_LAYOUTS = ("auto", "ragged", "padded")
BATCH_LAYOUT_ENV_VAR = "MAS_BATCH_LAYOUT"


class BatchingError(MasOrchestraError, RuntimeError):
    """A batched forward pass failed; every request in that batch gets this error (with the cause chained)."""


class BatchLayoutError(MasOrchestraError, ValueError):
    """A batch layout (argument or ``MAS_BATCH_LAYOUT``) that is not one of :data:`BATCH_LAYOUTS`."""


def resolve_batch_layout(layout: str | None) -> str:
    """``layout`` if given, else ``MAS_BATCH_LAYOUT``, else ``auto``.

    Args:
        layout: ``auto`` | ``ragged`` | ``padded``, or ``None``.

    Returns:
        The layout, lower-cased.

    Raises:
        BatchLayoutError: A value outside :data:`BATCH_LAYOUTS` (the message names where it came from).
    """
    return environment.choice(BATCH_LAYOUT_ENV_VAR, layout, field="batch_layout", choices=BATCH_LAYOUTS,
                              default="auto", error=BatchLayoutError)


class UnsupportedCacheError(MasOrchestraError, ValueError):
    """The model's cache has layers the batched decoder cannot decode (see :func:`supports_batching`)."""


@dataclass
class GenerationRequest:
    """One generation: prompt ids ``[1, n]`` and how to continue them."""

    input_ids: Any
    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop_strings: tuple[str, ...] = ()
    processor: Any = None  # a ConstrainedLogitsProcessor, used for this request only
    use_prefix_cache: bool = True
    jump_forward: bool = True  # append grammar-forced runs in one forward pass
    prefill_dtype: Any = None  # e.g. torch.bfloat16: prefill under autocast (mas_orchestra.local.precision)
    packed: bool = False  # decode on packed weights (mas_orchestra.local.packed_weights.decode_packed said so)
    threads: int | None = None
    future: Future[GenerationResult] = field(default_factory=Future)


@dataclass
class GenerationResult:
    """Generated ids (end-of-text excluded), why the row ended, and how much prompt came from the cache."""

    token_ids: list[int]
    finish_reason: str  # "stop" (end of text / stop string / grammar end) or "length"
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    forward_passes: int = 0
    end_token_id: int | None = None  # the end-of-text token that ended the row (not in token_ids), if one did
    #: Per token of ``token_ids``: the grammar allowed no other token there (its sampling probability was 1).
    forced: list[bool] = field(default_factory=list)
    end_forced: bool = False  # likewise for ``end_token_id``


@dataclass
class _Row:
    request: GenerationRequest
    ids: Any  # [1, prompt + generated] on the model device
    prompt_len: int
    generator: Any
    pending: list[int]  # tokens chosen but not yet run through the model
    cached: int = 0
    passes: int = 0
    generated: list[int] = field(default_factory=list)
    forced: list[bool] = field(default_factory=list)  # per generated token: the grammar's only choice
    result: GenerationResult | None = None


_BATCHERS: weakref.WeakSet[GenerationBatcher] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """End the workers before the interpreter does: a worker frozen inside torch at exit aborts the process."""
    for batcher in list(_BATCHERS):
        batcher.close(timeout=1.0)


#: transformers' switch that makes SDPA compute grouped-query attention in place even when a mask is given.
FORCE_GQA_ENV_VAR = "TRANSFORMERS_SDPA_FORCE_GQA"


def prefer_grouped_query_attention(device: str) -> None:
    """On a CPU, let SDPA attend grouped-query heads without copying the key/values once per query head.

    With an attention mask (every batched step has one) transformers repeats each key/value head for its query
    heads before calling SDPA, unless ``TRANSFORMERS_SDPA_FORCE_GQA=1``; torch's CPU kernel takes the mask and
    ``enable_gqa`` together, with the same result and about a third of the time per layer at a 1,000-token
    context (measured, ``benchmarks/batched_generation.py``). Not set for GPUs, where the fused kernels need no
    mask for GQA. An explicit setting in the environment wins.
    """
    if str(device).startswith("cpu"):
        environment.prefer_library_default(FORCE_GQA_ENV_VAR, "1")


def supports_batching(cache: Any) -> bool:
    """True when every layer of ``DynamicCache(config=model.config)`` is a full or sliding-window key/value layer:
    the batcher decodes such a model on plain full-length layers, which it pads, joins and cuts (the model's mask
    keeps a sliding window, so the tokens are ``generate``'s); not linear-attention, state-space, quantised layers."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    layers = getattr(cache, "layers", None) or []
    return bool(layers) and all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) for layer in layers)


class GenerationBatcher:
    """Decodes the queued requests of one model together (see the module docstring)."""

    def __init__(self, model: Any, tokenizer: Any, device: str, *, end_ids: set[int], prefix_cache: Any = None,
                 identity: str = "", max_batch: int = DEFAULT_MAX_BATCH, layout: str | None = None) -> None:
        layout = resolve_batch_layout(layout)
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.end_ids = end_ids
        self.prefix_cache = prefix_cache
        self.identity = identity
        self.max_batch = max_batch
        self.layout = layout
        self._ragged: bool | None = None if layout == "auto" else layout == "ragged"
        prefer_grouped_query_attention(device)
        self.peak_batch = 0  # most rows decoded together so far
        self.active_rows = 0  # rows in the running batch now
        # transformers renamed ``past_key_values`` to ``cache`` (5.x); pass whichever this version takes.
        import inspect

        self._cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self._queue: queue.Queue[GenerationRequest | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        _BATCHERS.add(self)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the worker once the running rows are done (new submissions start it again)."""
        with self._start_lock:
            thread = self._thread
            if thread is None or not thread.is_alive():
                return
            self._queue.put(None)
        thread.join(timeout)

    def submit(self, request: GenerationRequest) -> Future[GenerationResult]:
        """Queue ``request``; its future resolves to a :class:`GenerationResult` (or the row's own error)."""
        with self._start_lock:  # the worker ends only under this lock, with nothing queued
            self._queue.put(request)
            if self._thread is None or not self._thread.is_alive():
                self._start_worker()
        return request.future

    def _start_worker(self) -> None:
        """Start the worker thread (the caller holds ``_start_lock``)."""
        self._thread = threading.Thread(target=self._work, name="mas-orchestra-batcher", daemon=True)
        self._thread.start()

    def run(self, requests: list[GenerationRequest]) -> list[Future[GenerationResult]]:
        """Decode ``requests`` together on the calling thread; returns their futures, all resolved.

        For a caller that would only wait for the worker (GRPO rollouts): with torch's OpenMP backend, once a
        thread has run parallel regions (a training step), the same decode pass run from another thread was
        measured 1.2–1.3× slower on 2 cores (``benchmarks/decode_thread.py``). Requests submitted from other
        threads meanwhile join this batch; if a worker is already running, the requests go to it instead.
        """
        with self._start_lock:
            inline = self._thread is None or not self._thread.is_alive()
            for request in requests:
                self._queue.put(request)
            if inline:
                self._queue.put(None)  # end once these (and any that join them) are done
                self._thread = threading.current_thread()
        if not inline:
            wait([request.future for request in requests])  # each future keeps its own result or error
            return [request.future for request in requests]
        try:
            self._work()
        finally:
            with self._start_lock:
                if self._thread is threading.current_thread():
                    self._thread = None
                if not self._queue.empty():  # submitted after this batch ended: a worker serves them
                    self._start_worker()
        return [request.future for request in requests]

    def _may_end(self) -> bool:
        """True (and the worker is forgotten) when nothing is queued; else the worker goes on."""
        with self._start_lock:
            if not self._queue.empty():
                return False
            self._thread = None
            return True

    # ------------------------------------------------------------------ worker

    def _work(self) -> None:
        """The worker thread: never dies with requests waiting (an unexpected error fails them instead)."""
        admitted: list[_Row] = []
        try:
            self._loop(admitted)
        except BaseException as exc:
            err = BatchingError(f"the generation worker stopped: {exc}")
            err.__cause__ = exc
            for row in admitted:
                _fail(row.request, err)
            while not self._queue.empty():
                waiting = self._queue.get_nowait()
                if waiting is not None:
                    _fail(waiting, err)
            self.active_rows = 0
            if not isinstance(exc, Exception):
                raise

    def _loop(self, rows: list[_Row]) -> None:
        import torch

        stopping = False
        batch = self._new_batch()
        while True:
            if stopping and not rows:
                if self._may_end():
                    return
                stopping = False
            block = not rows
            while len(rows) < self.max_batch:
                try:
                    request = self._queue.get(block=block, timeout=30 if block else None)
                except queue.Empty:
                    if not rows and block:
                        if self._may_end():
                            return  # idle: the thread ends; submit starts a new one
                        continue
                    break
                if request is None:  # close(): finish the running rows, then end
                    stopping = True
                    break
                block = False
                if request.future.cancelled():
                    continue
                try:
                    with torch.inference_mode(), torch_threads(request.threads):
                        row, row_cache = self._prefill(request)
                except Exception as exc:  # this request alone fails
                    _fail(request, exc)
                    continue
                if row.result is not None:
                    _deliver(row)  # finished at its first token
                    continue
                rows.append(row)
                with torch.inference_mode():
                    batch.join(row.ids[0, :row.prompt_len], row.cached, row_cache)
            self.active_rows = len(rows)
            if not rows:
                if stopping:
                    return
                continue
            self.peak_batch = max(self.peak_batch, len(rows))
            try:
                with torch.inference_mode(), torch_threads(max((r.request.threads or 0) for r in rows) or None):
                    keep = self._step(rows, batch)
            except Exception as exc:
                err = BatchingError(f"batched decoding of {len(rows)} request(s) failed: {exc}")
                err.__cause__ = exc
                for row in rows:
                    _fail(row.request, err)
                rows.clear()
                batch = self._new_batch()
                self.active_rows = 0
                continue
            for row in rows:
                if row.result is not None:
                    _deliver(row)  # after the threads scope: a caller sees its own thread settings restored
            if len(keep) < len(rows):
                rows[:] = [rows[i] for i in keep]
                with torch.inference_mode():
                    batch.keep(keep)
                self.active_rows = len(rows)

    def _prefill(self, request: GenerationRequest) -> tuple[_Row, Any]:
        import torch
        from transformers import DynamicCache

        ids = request.input_ids.to(self.device)
        n = int(ids.shape[1])
        hit = None
        if request.use_prefix_cache and self.prefix_cache is not None:
            hit = self.prefix_cache.lookup(self.identity, ids[0], max_length=n - 1)
        start = hit.length if hit else 0
        cache: Any = DynamicCache(ddp_cache_data=hit.layers) if hit else DynamicCache()
        low_precision = request.prefill_dtype if n - start >= MIN_BF16_PREFILL_TOKENS else None
        # never packed, even for a few uncached tokens: what the prefix cache keeps is computed as the prefill says
        with prefill_autocast(low_precision):
            out = self.model(input_ids=ids[:, start:], use_cache=True, logits_to_keep=1,
                             position_ids=torch.arange(start, n, device=ids.device).unsqueeze(0),
                             **{self._cache_arg: cache})
        if low_precision is not None:  # decode (and the prefix cache) in the model's own precision
            cast_cache(cache, self.model.dtype)
        if request.use_prefix_cache and self.prefix_cache is not None:
            self.prefix_cache.store(self.identity, ids[0], [(layer.keys, layer.values) for layer in cache.layers],
                                    reused=start)
        generator = None
        if request.seed is not None:
            generator = torch.Generator(device=ids.device)
            generator.manual_seed(int(request.seed))
        row = _Row(request=request, ids=ids, prompt_len=n, generator=generator, pending=[], cached=start, passes=1)
        self._choose(row, out.logits[:, -1, :])
        return row, cache

    def _new_batch(self) -> Any:
        """An empty running batch in the layout this model decodes in (ragged where it can, else padded)."""
        if self._ragged is None or self._ragged:
            from mas_orchestra.local.ragged import supports_ragged

            supported = supports_ragged(self.model)
            if self._ragged and not supported:
                raise BatchLayoutError(
                    f"batch_layout='ragged': {type(self.model).__name__} cannot decode ragged (it needs SDPA "
                    "attention and full-attention layers only); use batch_layout='auto' or 'padded'")
            self._ragged = supported
        if self._ragged:
            from mas_orchestra.local.ragged import RaggedBatch

            return RaggedBatch(int(self.model.config.num_hidden_layers), self._cache_arg)
        from mas_orchestra.local.batch_cache import PaddedBatch

        return PaddedBatch(self._cache_arg, int(self.tokenizer.pad_token_id or 0))

    def _step(self, rows: list[_Row], batch: Any) -> list[int]:
        """One forward pass over every row's pending tokens; returns the indices of rows still running."""
        positions = [int(row.ids.shape[1]) - len(row.pending) for row in rows]
        # packed weights only when every row asked for them (one row asking float32 keeps the pass exact)
        with packed_decoding(all(row.request.packed for row in rows)):
            logits = batch.forward(self.model, [row.pending for row in rows], positions, self.device)
        keep = []
        for i, row in enumerate(rows):
            row.passes += 1
            if row.request.future.cancelled():
                continue  # cancelled while batched: it leaves, the others go on
            try:
                if not self._choose(row, logits[i:i + 1]):
                    keep.append(i)
            except Exception as exc:  # e.g. the row's grammar died: it fails alone
                _fail(row.request, exc)
        return keep

    def _choose(self, row: _Row, logits: Any) -> bool:
        """Pick the row's next token(s) from ``logits`` ``[1, vocab]``; returns True when the row is finished."""
        import torch

        request = row.request
        scores = logits.float()
        allowed = 0  # tokens the grammar left in the mask (counted once: it is also what flags a forced token)
        if request.processor is not None:
            scores = request.processor(row.ids, scores)
            allowed = int(torch.isfinite(scores).sum())
            if allowed == 0:
                raise GrammarError(
                    f"the {request.processor.constraint.name} grammar allows no token after "
                    f"{len(row.generated)} generated tokens; turn constrained decoding off with constrained=False "
                    "(CLI: --no-constrained)"
                )
        token = _sample(scores, request.temperature, request.top_p, row.generator)
        chosen = [token]
        # a token the grammar left alone in the mask, and every token of a jump forward, had no alternative
        forced = [allowed == 1]
        if request.processor is not None and request.jump_forward and token not in self.end_ids:
            extra = request.processor.jump_forward(0, token, len(row.generated) + 1)
            chosen += extra
            forced += [True] * len(extra)
        appended: list[int] = []
        for t, only in zip(chosen, forced, strict=True):
            if t in self.end_ids:
                return _finish(row, "stop", end_token_id=t, end_forced=only)
            row.generated.append(t)
            row.forced.append(only)
            appended.append(t)
            if len(row.generated) >= request.max_new_tokens:
                break
        row.pending = appended
        row.ids = torch.cat([row.ids, torch.tensor([appended], device=row.ids.device)], dim=1)
        if request.stop_strings and _hits_stop(self.tokenizer, row.generated, request.stop_strings):
            return _finish(row, "stop")
        if len(row.generated) >= request.max_new_tokens:
            return _finish(row, "length")
        return False


def _sample(scores: Any, temperature: float, top_p: float, generator: Any) -> int:
    """Greedy when ``temperature <= 0``; else temperature, then nucleus (top-p) sampling, as ``generate`` does."""
    import torch

    if temperature <= 0:
        return int(torch.argmax(scores, dim=-1)[0])
    scores = scores / temperature
    if top_p < 1.0:
        ordered, order = torch.sort(scores, descending=False)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - top_p)
        remove[..., -1:] = False  # keep at least the most likely token
        scores = scores.masked_fill(remove.scatter(1, order, remove), -float("inf"))
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator)[0, 0])


def _hits_stop(tokenizer: Any, generated: list[int], stops: tuple[str, ...]) -> bool:
    text = tokenizer.decode(generated, skip_special_tokens=True)
    return any(s in text for s in stops)


def _finish(row: _Row, reason: str, end_token_id: int | None = None, end_forced: bool = False) -> bool:
    """Record the row's result (delivered by the worker once the step is over)."""
    row.result = GenerationResult(token_ids=list(row.generated), finish_reason=reason, prompt_tokens=row.prompt_len,
                                  cached_prompt_tokens=row.cached, forward_passes=row.passes,
                                  end_token_id=end_token_id, forced=list(row.forced), end_forced=end_forced)
    return True


def _deliver(row: _Row) -> None:
    if row.request.future.cancelled() or row.result is None:
        return
    with contextlib.suppress(InvalidStateError):  # cancelled between the check and the set
        row.request.future.set_result(row.result)


def _fail(request: GenerationRequest, exc: BaseException) -> None:
    if request.future.cancelled():
        return
    with contextlib.suppress(InvalidStateError):  # cancelled meanwhile
        request.future.set_exception(exc)
