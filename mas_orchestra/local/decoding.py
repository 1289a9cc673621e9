"""Grammar-constrained generation for local transformers models, with xgrammar (runs on CPU and GPU).

:class:`ConstrainedLogitsProcessor` masks, at every step and for every row of a batch, the tokens that
would leave an :class:`~mas_orchestra.models.constraints.OutputConstraint`'s grammar. It also runs the
constraint's stages: when a staged orchestration grammar completes at ``<edge>``, the row continues under
the edge grammar built from what it wrote; when a reply is about to run out of tokens, it switches to a
grammar that closes the reasoning and writes the answer. Used by ``HFChatModel`` (``constraint=`` per call)
and by GRPO training rollouts (:func:`constrain_generate`).

Two rules keep the constraints' token budgets true for any sampling. Text the grammar forces (tags, closing
markup) is written with xgrammar's longest-match tokens instead of whatever prefix token was sampled — the
budget fitting counts markup at several characters per token, and a sampler free to spell ``</agent>`` one
character at a time would break it. Tokens that are only part of a UTF-8 character (byte-level BPE pieces)
are never sampled, so every free-text token is at least one character, as the fitting counts it.

Imports torch, transformers and xgrammar; nothing in the core imports this module at import time.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from mas_orchestra.errors import GrammarError, MissingExtraError
from mas_orchestra.models.constraints import OutputConstraint

__all__ = [
    "ConstrainedLogitsProcessor",
    "DecodingStats",
    "constrain_generate",
    "grammar_compiler",
    "require_xgrammar",
    "stop_token_ids",
]

log = logging.getLogger(__name__)


def require_xgrammar() -> Any:
    """Import xgrammar or raise :class:`MissingExtraError` with the install command."""
    try:
        import xgrammar
    except ImportError as exc:
        raise MissingExtraError("constrained decoding of local models (xgrammar)", "embedded", "xgrammar") from exc
    return xgrammar


_COMPILERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_COMPILERS_LOCK = threading.Lock()


def stop_token_ids(eos_token_id: int | list[int] | None, tokenizer: Any) -> list[int]:
    """The end-of-text ids ``generate`` stops on (its ``eos_token_id``, else the tokenizer's): a completed
    grammar may only be followed by one of them (any other "stop" token would be sampled without ending
    the row, which would then run to the length limit).

    Args:
        eos_token_id: ``generate``'s end-of-text id(s), or ``None``.
        tokenizer: The tokenizer (its ``eos_token_id`` is the fallback).

    Raises:
        GrammarError: Neither gives an id.
    """
    value = eos_token_id
    if value is None:
        value = getattr(tokenizer, "eos_token_id", None)
    ids = [value] if isinstance(value, int) else list(value or [])
    if not ids:
        raise GrammarError("constrained decoding needs an end-of-text token id (generation_config.eos_token_id)")
    return sorted({int(i) for i in ids})


#: Most bytes of compiled grammars a compiler keeps. Staged decoding compiles a grammar per stage and length
#: bound (~0.7 MiB each for a 49k-token vocabulary), and xgrammar's default keeps every one: over a long run the
#: distinct bounds are many. The wiring recipe's working set is ~44 MiB (60 distinct grammars in its first 100
#: compilations, no growth after step 2); recompiling an evicted stage grammar takes ~10-20 ms.
GRAMMAR_CACHE_BYTES = 64 * 2**20


def grammar_compiler(tokenizer: Any, vocab_size: int, stop_ids: list[int]) -> Any:
    """An xgrammar ``GrammarCompiler`` for this tokenizer and stop ids (cached; it keeps compiled grammars up to
    :data:`GRAMMAR_CACHE_BYTES`).

    Args:
        tokenizer: The model's tokenizer.
        vocab_size: The model's vocabulary size (its embedding rows).
        stop_ids: The end-of-text ids (:func:`stop_token_ids`).
    """
    xgr = require_xgrammar()
    key = (vocab_size, tuple(stop_ids))
    with _COMPILERS_LOCK:
        per_tokenizer = _COMPILERS.setdefault(tokenizer, {})
        compiler = per_tokenizer.get(key)
        if compiler is None:
            info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_ids))
            compiler = per_tokenizer[key] = xgr.GrammarCompiler(info, cache_enabled=True,
                                                                        cache_limit_bytes=GRAMMAR_CACHE_BYTES)
        return compiler


_WHOLE_CHARACTER_MASKS: weakref.WeakKeyDictionary[Any, dict[int, Any]] = weakref.WeakKeyDictionary()


def whole_character_mask(tokenizer: Any, words: int) -> Any:
    """A token bitmask (xgrammar's layout: ``words`` int32 words, bit ``t % 32`` of word ``t // 32``) that
    allows every token except those decoding to an incomplete UTF-8 character (byte-level BPE pieces of
    a multi-byte character). Cached per tokenizer.

    Args:
        tokenizer: The model's tokenizer.
        words: 32-bit words of the mask (ids past the tokenizer's vocabulary stay allowed).
    """
    import numpy as np
    import torch

    with _COMPILERS_LOCK:
        cached = _WHOLE_CHARACTER_MASKS.setdefault(tokenizer, {}).get(words)
        if cached is not None:
            return cached
    # Ids past the tokenizer's vocabulary (a model's padded embedding rows) stay allowed: the grammar masks them.
    n = min(words * 32, len(tokenizer)) if hasattr(tokenizer, "__len__") else words * 32
    ids = [[i] for i in range(n)]
    batch_decode = getattr(tokenizer, "batch_decode", None)
    texts = batch_decode(ids) if batch_decode else [_decode_or_empty(tokenizer, i) for i in ids]
    bits = np.ones(words * 32, dtype=bool)
    for token, text in enumerate(texts):
        if "\ufffd" in text:
            bits[token] = False
    # Little-endian bit order inside each 32-bit word, as xgrammar packs its bitmask.
    packed = np.packbits(bits.reshape(words, 32), axis=1, bitorder="little").view("<i4").reshape(words)
    mask = torch.from_numpy(packed.copy())
    with _COMPILERS_LOCK:
        _WHOLE_CHARACTER_MASKS[tokenizer][words] = mask
    return mask


def _decode_or_empty(tokenizer: Any, ids: list[int]) -> str:
    try:
        return str(tokenizer.decode(ids))
    except (IndexError, KeyError, ValueError):
        return ""


def _allow_only(row: Any, token: int) -> None:
    """Clear the bitmask ``row`` (int32 words, as in :func:`whole_character_mask`) but for ``token``'s bit."""
    row.zero_()
    bit = 1 << (token % 32)
    row[token // 32] = bit - (1 << 32) if bit >= 1 << 31 else bit  # bit 31 is the int32 sign bit


def _compile(compiler: Any, grammar: str, what: str) -> Any:
    try:
        return compiler.compile_grammar(grammar)
    except RuntimeError as exc:  # xgrammar reports EBNF errors as RuntimeError
        raise GrammarError(
            f"xgrammar could not compile the {what} grammar: {exc}; turn constrained decoding off with "
            "constrained=False (CLI: --no-constrained)"
        ) from exc


@dataclass
class DecodingStats:
    """What the constraint did during one generate call (summed over rows).

    Attributes:
        rows: Rows decoded.
        stage_switches: Switches to a next stage's grammar.
        closings: Switches to a closing grammar at the token reserve.
        rejected_tokens: Sampled tokens the grammar did not accept.
        forced_tokens: Tokens the grammar forced.
        mask_seconds: Seconds spent computing token masks.
    """

    rows: int = 0
    stage_switches: int = 0
    closings: int = 0
    rejected_tokens: int = 0
    forced_tokens: int = 0
    mask_seconds: float = 0.0


@dataclass
class _Row:
    matcher: Any
    done: bool = False
    closed: bool = False
    stages: int = 0
    consumed: int = 0  # generated tokens the matcher has accepted
    stage_starts: list[int] = field(default_factory=list)  # tokens left when each stage began
    forced: list[int] = field(default_factory=list)  # the tokens the grammar forced at the last mask


@dataclass
class ConstrainedLogitsProcessor:
    """A transformers logits processor enforcing ``constraint`` on every row; use one per ``generate`` call.

    Put no top-k/top-p warper before it that could remove every allowed token: generate with ``top_p=1``
    (temperature scaling commutes with the mask).

    Attributes:
        constraint: The constraint every row decodes under.
        tokenizer: The model's tokenizer.
        compiler: The xgrammar compiler (:func:`grammar_compiler`).
        max_new_tokens: The call's token budget (stages and the closing are fitted to it).
        stats: What the constraint did during the call.
    """

    constraint: OutputConstraint
    tokenizer: Any
    compiler: Any
    max_new_tokens: int | None = None
    stats: DecodingStats = field(default_factory=DecodingStats)
    _rows: list[_Row] = field(default_factory=list)
    _start: int = 0
    _bitmask: Any = None
    _reserve: int = 0
    _whole: Any = None

    def __post_init__(self) -> None:
        self._xgr = require_xgrammar()
        self._first = _compile(self.compiler, self.constraint.grammar(self.max_new_tokens, staged=True),
                               self.constraint.name)
        self._reserve = self.constraint.reserve_tokens(self.max_new_tokens)

    def _text(self, input_ids: Any, row: int) -> str:
        return str(self.tokenizer.decode(input_ids[row, self._start:].tolist(), skip_special_tokens=True))

    def _switch(self, row: _Row, grammar: str) -> None:
        row.matcher = self._xgr.GrammarMatcher(_compile(self.compiler, grammar, self.constraint.name))

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        """Mask ``scores`` row by row with each row's grammar matcher (transformers' logits-processor protocol)."""
        started = time.perf_counter()
        xgr = self._xgr
        if not self._rows:
            self._start = int(input_ids.shape[1])
            starts = [] if self.max_new_tokens is None else [self.max_new_tokens]
            self._rows = [_Row(xgr.GrammarMatcher(self._first), stage_starts=list(starts))
                          for _ in range(input_ids.shape[0])]
            self._bitmask = xgr.allocate_token_bitmask(len(self._rows), self._first.tokenizer_info.vocab_size)
            self._whole = whole_character_mask(self.tokenizer, int(self._bitmask.shape[1]))
            self.stats.rows += len(self._rows)
        else:
            generated = int(input_ids.shape[1]) - self._start
            for i, row in enumerate(self._rows):
                if not row.done:
                    self._advance(row, i, input_ids, generated)
        for i, row in enumerate(self._rows):
            if not row.done:
                self._fill(row, i)
        device = scores.device
        masked = scores if device.type in ("cpu", "cuda") else scores.to("cpu")
        xgr.apply_token_bitmask_inplace(masked, self._bitmask.to(masked.device))
        self.stats.mask_seconds += time.perf_counter() - started
        return masked if masked.device == device else masked.to(device)

    def _advance(self, row: _Row, i: int, input_ids: Any, generated: int) -> None:
        """Accept the row's tokens since the last call (one per decode step; more after a jump forward)."""
        new_tokens = input_ids[i, self._start + row.consumed:].tolist()
        row.consumed = generated
        for token in new_tokens:
            if not row.matcher.accept_token(int(token)):
                # Only possible if something outside us changed the sampled token: stop constraining.
                self.stats.rejected_tokens += 1
                row.done = True
                self._bitmask[i].fill_(-1)
                return
            if row.matcher.is_terminated():
                row.done = True
                return
        remaining = None if self.max_new_tokens is None else self.max_new_tokens - generated
        if row.matcher.is_completed():
            nxt = self.constraint.next_stage(self._text(input_ids, i), remaining, stage_starts=row.stage_starts)
            if nxt is not None:
                self._switch(row, nxt)
                if remaining is not None:
                    row.stage_starts.append(remaining)
                row.stages += 1
                self.stats.stage_switches += 1
        if remaining is not None and not row.closed and remaining <= self._reserve:
            closing = self.constraint.closing_grammar(self._text(input_ids, i), remaining)
            row.closed = True
            if closing is not None:
                self._switch(row, closing)
                self.stats.closings += 1

    def jump_forward(self, i: int, chosen: int, generated: int) -> list[int]:
        """Tokens the grammar forces right after ``chosen`` (row ``i``'s next token, the ``generated``-th), to
        append in the same forward pass instead of one decode step each.

        Empty unless ``chosen`` is the first of the forced run found at the last mask. The run is cut so that
        the call's token budget holds and, before the closing switch, the row never jumps past the point
        where the closing grammar must take over (its budget fitting assumes that point is reached exactly).

        Args:
            i: The row.
            chosen: The row's sampled next token.
            generated: Tokens the row has generated, ``chosen`` included.
        """
        if not self._rows or i >= len(self._rows):
            return []
        row = self._rows[i]
        if row.done or len(row.forced) < 2 or row.forced[0] != chosen:
            return []
        extra = row.forced[1:]
        if self.max_new_tokens is not None:
            room = self.max_new_tokens - generated
            if not row.closed:
                room -= self._reserve
            extra = extra[: max(0, room)]
        self.stats.forced_tokens += len(extra)
        return [int(t) for t in extra]

    def _fill(self, row: _Row, i: int) -> None:
        row.matcher.fill_next_token_bitmask(self._bitmask, i)
        forced = row.matcher.find_jump_forward_tokens()
        row.forced = [int(t) for t in forced] if forced else []
        if forced:  # markup the grammar forces: spell it with the longest tokens (see the module docstring)
            _allow_only(self._bitmask[i], int(forced[0]))
            self.stats.forced_tokens += 1
            return
        whole = self._bitmask[i] & self._whole
        if bool(whole.any()):  # never leave a row without a token (a grammar that only allows a piece)
            self._bitmask[i] = whole


def constrain_generate(model: Any, tokenizer: Any, constraint: OutputConstraint) -> DecodingStats:
    """Make every later ``model.generate`` call (e.g. TRL's rollouts) decode under ``constraint``.

    Installs, on the innermost transformers model, a ``generate`` that adds a fresh
    :class:`ConstrainedLogitsProcessor` per call (PEFT wrappers delegate to it).

    Args:
        model: The model (a PEFT model's base model is patched).
        tokenizer: Its tokenizer.
        constraint: The constraint.

    Returns:
        The running :class:`DecodingStats` of all calls.
    """
    from transformers import LogitsProcessorList

    # A PEFT model's generate delegates to the transformers model inside it: patch that one.
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    original = type(inner).generate
    totals = DecodingStats()

    def generate(*args: Any, **kwargs: Any) -> Any:
        gen_config = kwargs.get("generation_config") or inner.generation_config
        max_new = kwargs.get("max_new_tokens") or getattr(gen_config, "max_new_tokens", None)
        stops = stop_token_ids(kwargs.get("eos_token_id", getattr(gen_config, "eos_token_id", None)), tokenizer)
        compiler = grammar_compiler(tokenizer, int(inner.config.vocab_size), stops)
        processor = ConstrainedLogitsProcessor(constraint, tokenizer, compiler, max_new_tokens=max_new)
        processors = LogitsProcessorList([*(kwargs.pop("logits_processor", None) or []), processor])
        try:
            return original(inner, *args, logits_processor=processors, **kwargs)
        finally:
            for name in ("rows", "stage_switches", "closings", "rejected_tokens", "forced_tokens", "mask_seconds"):
                setattr(totals, name, getattr(totals, name) + getattr(processor.stats, name))

    inner.generate = generate
    return totals
