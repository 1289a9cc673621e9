"""A local-transformers LangChain chat model (:class:`HFChatModel`) and its factories.

:class:`HFChatModel` runs any local Hugging Face model folder as a LangChain chat model;
:func:`load_embedded_chat_model` runs the offline "embedded" default model, whose GGUF-to-HF
conversion and cache live in :mod:`mas_orchestra.local.embedded`.

Importing this module is cheap: ``torch`` and ``transformers`` are imported only inside
the functions that need them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
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
from pydantic import Field, PrivateAttr

from mas_orchestra.local.embedded import embedded_model_dir
from mas_orchestra.local.engine import LocalEngine, LocalReply, PendingReply, Sampling, load_engine
from mas_orchestra.local.options import LocalEngineOptions

logger = logging.getLogger(__name__)

__all__ = ["HFChatModel", "load_embedded_chat_model", "load_hf_chat_model"]

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


class HFChatModel(BaseChatModel):
    """LangChain chat model running a local Hugging Face causal LM on the local engine (:mod:`mas_orchestra.local`).

    Weights are loaded lazily on first use and shared by every ``HFChatModel`` on the same ``(model_path,
    engine.device)``. Every call goes through :meth:`~mas_orchestra.local.engine.LocalEngine.submit`: concurrent
    calls to one loaded model are decoded together in one batch, reusing the key/values of a prompt prefix seen
    before and appending text a grammar forces in one forward pass; :meth:`ainvoke` waits without blocking the
    event loop, and cancelling it takes the request out of its batch.

    Per-call keyword arguments (``invoke(..., temperature=0)`` or ``.bind(...)``): ``temperature`` (``<= 0``
    means greedy), ``top_p``, ``max_new_tokens`` (alias ``max_tokens``), ``seed`` (reproducible sampling without
    touching the global RNG: each request samples from its own generator, so the same seed gives the same reply
    whatever other requests share its batch) and ``constraint`` (an
    :class:`~mas_orchestra.models.constraints.OutputConstraint`: the reply is decoded under its grammar with
    xgrammar; ``top_p`` is then 1 so that no sampling filter can remove every allowed token).

    ``engine`` (:class:`~mas_orchestra.local.options.LocalEngineOptions`) holds how the engine runs: device,
    torch threads, prefix caching, jump-forward, prefill precision, decode weights, cache budgets, batch size.
    """

    model_path: str
    max_new_tokens: int = 256
    temperature: float = 0.5
    top_p: float = 0.95
    engine: LocalEngineOptions = Field(default_factory=LocalEngineOptions)

    _engine: LocalEngine | None = PrivateAttr(default=None)

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
            "device": self.engine.device,
        }

    @property
    def model_name(self) -> str:
        """Short model name (the model folder's name)."""
        return Path(self.model_path).name

    def _load(self) -> LocalEngine:
        if self._engine is None:
            self._engine = load_engine(self.model_path, self.engine.device)
        return self._engine

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result(self._submit(messages, stop, kwargs).result())

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Queue from a worker thread (loading and templating block), then await the row: cancelling this coroutine
        # (e.g. a time-out) cancels the row's future, which takes it out of its batch at the next step.
        pending = await asyncio.to_thread(self._submit, messages, stop, kwargs)
        return self._result(await pending.wait())

    def _submit(self, messages: Sequence[BaseMessage], stop: Sequence[str] | None,
                kwargs: dict[str, Any]) -> PendingReply:
        """Queue the call on the local engine (loads the model on first use)."""
        unknown = set(kwargs) - _GEN_KWARGS
        if unknown:
            logger.debug("HFChatModel ignores unsupported kwargs: %s", sorted(unknown))
        seed = kwargs.get("seed")
        sampling = Sampling(
            max_new_tokens=int(kwargs.get("max_new_tokens", kwargs.get("max_tokens", self.max_new_tokens))),
            temperature=float(kwargs.get("temperature", self.temperature)),
            top_p=float(kwargs.get("top_p", self.top_p)),
            seed=None if seed is None else int(seed), stop=tuple(stop or ()), constraint=kwargs.get("constraint"),
        )
        return self._load().submit(_to_chat_dicts(messages), sampling, self.engine)

    def _result(self, reply: LocalReply) -> ChatResult:
        response_metadata: dict[str, Any] = {
            "model_name": self.model_name, "finish_reason": reply.finish_reason,
            "cached_prompt_tokens": reply.cached_prompt_tokens, "forward_passes": reply.forward_passes,
        }
        if reply.constrained is not None:
            response_metadata["constrained"] = reply.constrained
        n_in, n_out = reply.prompt_tokens, reply.output_tokens
        message = AIMessage(
            content=reply.text,
            usage_metadata={"input_tokens": n_in, "output_tokens": n_out, "total_tokens": n_in + n_out},
            response_metadata=response_metadata,
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


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
