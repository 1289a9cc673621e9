"""The documented import path of the local chat model; the code lives in :mod:`mas_orchestra.models.hf_chat`
(the chat model) and :mod:`mas_orchestra.models.embedded` (the embedded model's conversion and cache).

Kept because the notebooks import from here; new code imports from those modules.
"""

from mas_orchestra.models.embedded import (
    CACHE_ENV_VAR,
    CONVERSION_FORMAT_VERSION,
    EMBEDDED_DIR_NAME,
    EMBEDDED_GGUF_FILE,
    EMBEDDED_INSTALL_HINT,
    EMBEDDED_MODEL_NAME,
    MARKER_FILE,
    SMOLLM2_CHAT_TEMPLATE,
    SMOLLM2_INSTALL_HINT,
    EmbeddedModelUnavailableError,
    default_cache_root,
    embedded_model_dir,
)
from mas_orchestra.models.hf_chat import HFChatModel, clear_loaded_models, load_embedded_chat_model, load_hf_chat_model

__all__ = [
    "CACHE_ENV_VAR",
    "CONVERSION_FORMAT_VERSION",
    "EMBEDDED_DIR_NAME",
    "EMBEDDED_GGUF_FILE",
    "EMBEDDED_INSTALL_HINT",
    "EMBEDDED_MODEL_NAME",
    "MARKER_FILE",
    "SMOLLM2_CHAT_TEMPLATE",
    "SMOLLM2_INSTALL_HINT",
    "EmbeddedModelUnavailableError",
    "HFChatModel",
    "clear_loaded_models",
    "default_cache_root",
    "embedded_model_dir",
    "load_embedded_chat_model",
    "load_hf_chat_model",
]
