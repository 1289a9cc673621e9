"""Models: model strings → LangChain chat models, the local chat model, and output constraints.

- :mod:`~mas_orchestra.models.resolve`: model strings (``embedded``, ``hf:``, ``openai:``, ``vllm:`` …) and the
  retry policy for transient errors;
- :mod:`~mas_orchestra.models.hf_chat`: the LangChain chat model over the local engine (:mod:`mas_orchestra.local`);
- :mod:`~mas_orchestra.models.constraints`: how each backend is told to decode under the spec's grammars.

Importing this package loads no torch or transformers (the local model loads them when it is built).
"""

from mas_orchestra.models.resolve import (
    MODEL_FORMS,
    MissingCredentialsError,
    TransientModelError,
    is_transient,
    resolve_model,
    with_transient_retry,
)

__all__ = [
    "MODEL_FORMS",
    "MissingCredentialsError",
    "TransientModelError",
    "is_transient",
    "resolve_model",
    "with_transient_retry",
]
