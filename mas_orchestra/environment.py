"""Every environment variable mas-orchestra reads, declared once: name, type, default and what it does.

The rules this module keeps for the whole project:

* **One prefix.** Our variables are called ``MAS_*``. The few that used to be called ``MAS_ORCHESTRA_*`` are
  still read under their old name for one release, with a :class:`DeprecationWarning` naming the new one.
* **Read when used, never at import.** Each accessor reads ``os.environ`` when it is called, which is when the
  object that needs the value is built; importing a module reads nothing.
* **Explicit argument > environment > default.** Every accessor takes the caller's explicit value first
  (``None`` meaning "not given"), then the variable, then the declared default.
* **No library writes.** Only :func:`prefer_library_default` sets a variable, and only for third-party switches
  that have no other interface (transformers, tokenizers), never over a value the user set.
* **One cache root.** :func:`cache_root`: ``$MAS_CACHE_DIR``, else ``$XDG_CACHE_HOME/mas-orchestra``, else
  ``~/.cache/mas-orchestra``; the embedded model, the prompt-prefix store and the search cache live under it.

``python -m mas_orchestra.environment --write docs/reference/environment.md`` regenerates the tables of the
reference page (a test keeps them equal to this module). This module imports only the standard library and
:mod:`mas_orchestra.errors`.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from mas_orchestra.errors import MasOrchestraError

__all__ = [
    "EXTERNAL",
    "VARIABLES",
    "EnvironmentVariableError",
    "Variable",
    "cache_root",
    "choice",
    "declared",
    "flag",
    "generated_part",
    "items",
    "mebibytes",
    "paths",
    "positive_int",
    "prefer_library_default",
    "raw",
    "reference_tables",
    "search_cache_path",
    "text",
    "write_reference",
]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class EnvironmentVariableError(MasOrchestraError, ValueError):
    """An environment variable holds a value of the wrong form (the message names it and the valid forms)."""


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, the form of its value, its default and what it does.

    Attributes:
        name: the variable's name.
        kind: the form of its value, as the reference page shows it (``text``, ``flag``, ``integer``, ``MiB``,
            ``path``, ``paths``, ``list`` or ``a | b | c`` for a choice).
        default: the value used when it is unset, as text (empty when there is none).
        doc: what it does, one or two sentences.
        group: the part of the project that reads it (a heading of the reference page).
        old_names: former names still read, with a :class:`DeprecationWarning`.
    """

    name: str
    kind: str
    default: str
    doc: str
    group: str
    old_names: tuple[str, ...] = ()


VARIABLES: tuple[Variable, ...] = (
    # Local models
    Variable("MAS_CACHE_DIR", "path", "`$XDG_CACHE_HOME/mas-orchestra`, else `~/.cache/mas-orchestra`",
             "Root of everything mas-orchestra caches: the converted embedded model, the prompt-prefix store, the "
             "web search cache.", "Local models", old_names=("MAS_ORCHESTRA_CACHE",)),
    Variable("MAS_TORCH_THREADS", "integer", "`OMP_NUM_THREADS`, else usable cores / `LOCAL_WORLD_SIZE`",
             "Torch intra-op threads of local generation (`LocalEngineOptions(torch_threads=)` wins); use `1` on a "
             "shared machine or in CI ([local models](../guides/local-models.md)).", "Local models"),
    Variable("MAS_PREFILL_DTYPE", "auto | float32 | bfloat16", "auto",
             "Precision prompts are prefilled in on a CPU (`LocalEngineOptions(prefill_precision=)` wins; training "
             "rollouts default to the training forward's precision).", "Local models"),
    Variable("MAS_DECODE_WEIGHTS", "auto | float32 | int4", "auto",
             "Weights decode steps read on a CPU: `int4` packs a 4-bit model's layers "
             "(`LocalEngineOptions(decode_weights=)` wins; training rollouts default to `float32` outside bf16 "
             "autocast).", "Local models"),
    Variable("MAS_BATCH_LAYOUT", "auto | ragged | padded", "auto",
             "How a local model's decode batch lays out its rows: `ragged` runs only real tokens and holds a shared "
             "prompt once, `padded` pads every row to the longest (`LocalEngineOptions(batch_layout=)` wins; `auto`: "
             "ragged where the model supports it).", "Local models"),
    Variable("MAS_PREFIX_CACHE_MB", "MiB", "256",
             "In-memory budget of cached prompt key/values per model; `0` turns the cache off.", "Local models"),
    Variable("MAS_PREFIX_STORE_MB", "MiB", "512",
             "On-disk budget of stored prompt key/values per model; `0` turns the store off.", "Local models"),
    Variable("MAS_PREFIX_STORE_DIR", "path", "`<cache root>/prefixes`",
             "Folder of the on-disk prompt-prefix store.", "Local models"),
    # Grading and search
    Variable("MAS_GRADING_BACKEND", "process | thread", "process",
             "How Math-Verify checks are time-bounded: killable worker processes, or daemon threads.",
             "Grading and search", old_names=("MAS_ORCHESTRA_GRADING_BACKEND",)),
    Variable("MAS_GRADING_WORKERS", "integer", "min(4, cores)", "Number of Math-Verify worker processes.",
             "Grading and search", old_names=("MAS_ORCHESTRA_GRADING_WORKERS",)),
    Variable("MAS_SEARCH_CACHE", "path", "`<cache root>/search.sqlite`",
             "SQLite file caching web search results and fetched pages.", "Grading and search",
             old_names=("MAS_ORCHESTRA_SEARCH_CACHE",)),
    # The served graphs (langgraph.json)
    Variable("MAS_ORCHESTRATOR", "text", "embedded",
             "Orchestrator model string of the served graph; always allowed by the model policies.", "Served graphs"),
    Variable("MAS_SUBAGENT", "text", "embedded",
             "Sub-agent model string of the served graphs; always allowed by the model policies.", "Served graphs"),
    Variable("MAS_DOM", "high | low", "high", "Degree of multi-agentness of the served graph.", "Served graphs"),
    Variable("MAS_APPROVAL", "flag", "false",
             "Pause every served run for approval of its spec before it executes.", "Served graphs"),
    Variable("MAS_SEARCH", "text", "",
             "Search backend of the served graph (`bm25:<corpus.jsonl>`, `ddg`, `tavily`); unset: no search nodes.",
             "Served graphs"),
    Variable("MAS_MCP", "path", "", "An `{\"mcpServers\": …}` file whose tools the served graph offers.",
             "Served graphs"),
    Variable("MAS_SERVED_MODELS", "list", "",
             "Comma-separated model patterns (e.g. `openai:*`) a run's config may name besides the built-in ones.",
             "Served graphs"),
    Variable("MAS_SERVED_ALLOW_HF_PATHS", "flag", "false",
             "Let a run's config name `hf:<path>` models.", "Served graphs"),
    Variable("MAS_SERVED_ALLOW_REMOTE_VLLM", "flag", "false",
             "Let a run's config name `vllm:` URLs off this machine.", "Served graphs"),
    Variable("MAS_POSTGRES_URL", "text", "",
             "Database URL of the server's checkpoints under `langgraph.postgres.json` "
             "([PostgreSQL](../guides/postgresql.md)).", "Served graphs"),
    # The studio
    Variable("MAS_STUDIO_TOKEN", "text", "a random token, printed",
             "Token the studio's URL and every API request carry (`--token` wins); at least 8 characters.",
             "Studio"),
    Variable("MAS_STUDIO_RUNS", "paths", "", "Run folders the served studio browses, separated by `os.pathsep` "
             "([studio](../guides/studio.md)).",
             "Studio"),
    Variable("MAS_STUDIO_DB", "path", "studio.sqlite", "SQLite file of the served studio's threads.", "Studio"),
    Variable("MAS_STUDIO_DATA", "paths", "", "Data sets the served studio offers, separated by `os.pathsep`.",
             "Studio"),
    Variable("MAS_STUDIO_ALLOW_HOSTS", "list", "",
             "Comma-separated Host names the served studio answers besides the loopback ones.", "Studio"),
    Variable("MAS_STUDIO_ALLOW_MODELS", "list", "",
             "Comma-separated model patterns the served studio accepts besides the built-in ones.", "Studio"),
)
"""The ``MAS_*`` variables, in the order of the reference page."""

EXTERNAL: tuple[Variable, ...] = (
    Variable("XDG_CACHE_HOME", "path", "~/.cache", "Where the cache root goes when `MAS_CACHE_DIR` is unset.",
             "Read by mas-orchestra, named by others"),
    Variable("OMP_NUM_THREADS", "integer", "", "Torch threads of local generation when `MAS_TORCH_THREADS` is unset.",
             "Read by mas-orchestra, named by others"),
    Variable("LOCAL_WORLD_SIZE", "integer", "1",
             "Processes per machine (set by `accelerate launch` / `torchrun`): local generation divides the cores "
             "among them.", "Read by mas-orchestra, named by others"),
)
"""Variables other tools define that mas-orchestra reads itself. Those only third-party libraries read
(``OPENAI_API_KEY``, ``HF_HUB_OFFLINE``, ``TAVILY_API_KEY``, ``VLLM_API_KEY``, ``WORLD_SIZE`` …) are theirs."""

_BY_NAME: dict[str, Variable] = {v.name: v for v in (*VARIABLES, *EXTERNAL)}


def declared(name: str) -> Variable:
    """The declaration of ``name``.

    Args:
        name: The variable's name.

    Raises:
        KeyError: ``name`` is not declared here (every variable the project reads must be).
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in mas_orchestra.environment; add a Variable for it") from None


def raw(name: str) -> str | None:
    """The stripped value of ``name`` (or of one of its old names, with a warning); ``None`` when unset or empty.

    Args:
        name: The variable's name (declared in this module).

    Raises:
        KeyError: ``name`` is not declared in this module.
    """
    variable = declared(name)
    value = os.environ.get(name, "").strip()
    if value:
        return value
    for old in variable.old_names:
        value = os.environ.get(old, "").strip()
        if value:
            warnings.warn(f"the environment variable {old} is deprecated and will stop being read in the next "
                          f"release; rename it to {name}", DeprecationWarning, stacklevel=3)
            return value
    return None


def text(name: str, explicit: str | None = None, default: str | None = None) -> str | None:
    """``explicit`` if given (not ``None``), else the variable's value, else ``default``.

    Args:
        name: The variable's name (declared in this module).
        explicit: The caller's value.
        default: The value when the variable is unset or empty.
    """
    if explicit is not None:
        return explicit
    value = raw(name)
    return default if value is None else value


def flag(name: str, explicit: bool | None = None) -> bool:
    """``explicit`` if given, else whether the variable says yes (``1``/``true``/``yes``/``on``); unset is False.

    Args:
        name: The variable's name (declared in this module).
        explicit: The caller's value, which wins when not ``None``.

    Raises:
        EnvironmentVariableError: a value that is neither a yes nor a no (``0``/``false``/``no``/``off``).
    """
    if explicit is not None:
        return explicit
    value = raw(name)
    if value is None:
        return False
    lowered = value.lower()
    if lowered not in _TRUE | _FALSE:
        raise EnvironmentVariableError(f"{name}={value!r} is not a yes/no value; set it to 1 or 0, or unset it")
    return lowered in _TRUE


def items(name: str, explicit: list[str] | None = None) -> list[str]:
    """``explicit`` if given, else the variable's comma-separated items (blank items dropped).

    Args:
        name: The variable's name (declared in this module).
        explicit: The caller's items, which win when not ``None``.
    """
    if explicit is not None:
        return list(explicit)
    return [part.strip() for part in (raw(name) or "").split(",") if part.strip()]


def paths(name: str, explicit: list[str] | None = None) -> list[str]:
    """``explicit`` if given, else the variable's paths, separated by ``os.pathsep`` (blank entries dropped).

    Args:
        name: The variable's name (declared in this module).
        explicit: The caller's paths, which win when not ``None``.
    """
    if explicit is not None:
        return list(explicit)
    return [part for part in (raw(name) or "").split(os.pathsep) if part]


def positive_int(name: str, explicit: int | None = None, *,
                 error: type[MasOrchestraError] = EnvironmentVariableError) -> int | None:
    """``explicit`` if given, else the variable as a positive integer; ``None`` when unset.

    Args:
        name: The variable's name (declared in this module).
        explicit: The caller's value, which wins when not ``None``.
        error: The error class raised for a bad value.

    Raises:
        EnvironmentVariableError: (or ``error``) a value that is not a positive integer.
    """
    if explicit is not None:
        return explicit
    value = raw(name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise error(f"{name}={value!r} is not a positive integer; set it to e.g. 1, or unset it")
    return number


def mebibytes(name: str, default_mib: int, explicit_bytes: int | None = None, *,
              error: type[MasOrchestraError] = EnvironmentVariableError) -> int:
    """A byte budget: ``explicit_bytes`` if given, else the variable in MiB, else ``default_mib`` MiB.

    Args:
        name: The variable's name (declared in this module).
        default_mib: The budget in MiB when the variable is unset.
        explicit_bytes: The caller's budget in bytes, which wins when not ``None``.
        error: The error class raised for a bad value.

    Raises:
        EnvironmentVariableError: (or ``error``) a value that is not a number of MiB >= 0.
    """
    if explicit_bytes is not None:
        return explicit_bytes
    value = raw(name)
    if value is None:
        return default_mib * 2**20
    try:
        mib = float(value)
    except ValueError:
        mib = -1.0
    if mib < 0:
        raise error(f"{name}={value!r} is not a size in MiB (>= 0); e.g. {default_mib}, or 0 to turn it off")
    return int(mib * 2**20)


def choice(name: str, explicit: str | None, *, field: str, choices: tuple[str, ...], default: str,
           error: type[MasOrchestraError] = EnvironmentVariableError) -> str:
    """``explicit`` if given (non-empty), else the variable, else ``default``: lower-cased, one of ``choices``.

    Args:
        name: the variable.
        explicit: the caller's value (``None`` or empty: not given).
        field: the argument's name, for the message when ``explicit`` is wrong.
        choices: the valid values.
        default: the value when neither is given.
        error: the error class to raise.

    Returns:
        The chosen value.

    Raises:
        EnvironmentVariableError: (or ``error``) a value outside ``choices``; the message names the argument or
            the variable it came from.
    """
    given = explicit.strip() if explicit else ""
    value = (given or raw(name) or default).strip().lower()
    if value not in choices:
        where = field if given else name
        raise error(f"{where}={value!r}: valid values are {', '.join(choices)}")
    return value


def cache_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The root of everything mas-orchestra caches.

    Args:
        explicit: The root; default ``$MAS_CACHE_DIR``, else ``$XDG_CACHE_HOME/mas-orchestra``, else
            ``~/.cache/mas-orchestra``.
    """
    if explicit is not None:
        return Path(explicit).expanduser()
    configured = raw("MAS_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path(raw("XDG_CACHE_HOME") or "~/.cache").expanduser() / "mas-orchestra"


def search_cache_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The web search cache file: ``explicit``, else ``$MAS_SEARCH_CACHE``, else ``<cache root>/search.sqlite``.

    Args:
        explicit: The file (``~`` expanded), which wins when not ``None``.
    """
    if explicit is not None:
        return Path(explicit).expanduser()
    configured = raw("MAS_SEARCH_CACHE")
    return Path(configured).expanduser() if configured else cache_root() / "search.sqlite"


def prefer_library_default(name: str, value: str) -> None:
    """Set a third-party library's switch to ``value`` unless the user has set it.

    Only for switches a library reads from the environment and offers no other way to set (transformers'
    ``TRANSFORMERS_SDPA_FORCE_GQA``, tokenizers' ``TOKENIZERS_PARALLELISM``, the capacities of PyTorch's ideep and
    oneDNN kernel caches); the single place in the project that writes ``os.environ``.

    Args:
        name: The switch (one of :data:`LIBRARY_SWITCHES`).
        value: Its value, unless the user has set one.

    Raises:
        KeyError: ``name`` is not one of the switches listed in :data:`LIBRARY_SWITCHES`.
    """
    if name not in LIBRARY_SWITCHES:
        raise KeyError(f"{name} is not a library switch mas-orchestra may set; see LIBRARY_SWITCHES")
    os.environ.setdefault(name, value)


LIBRARY_SWITCHES: frozenset[str] = frozenset({
    "TRANSFORMERS_SDPA_FORCE_GQA", "TOKENIZERS_PARALLELISM", "LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY",
})
"""Third-party switches :func:`prefer_library_default` may set (each a documented library default)."""


def _table(variables: tuple[Variable, ...]) -> list[str]:
    lines = ["| Variable | Type | Default | What it does |", "| --- | --- | --- | --- |"]
    for v in variables:
        old = f" Former name: {', '.join(f'`{n}`' for n in v.old_names)} (deprecated)." if v.old_names else ""
        default = v.default if v.default.startswith("`") or not v.default else f"`{v.default}`"
        options = [f"`{option.strip()}`" for option in v.kind.split("|")]
        kind = f"{', '.join(options[:-1])} or {options[-1]}" if len(options) > 1 else v.kind
        lines.append(f"| `{v.name}` | {kind} | {default or '—'} | {v.doc}{old} |")
    return lines


#: The lines around the generated part of ``docs/reference/environment.md`` (the rest of the page is written by
#: hand: variables only third-party libraries read, and those of the tests and CI).
BEGIN_GENERATED = ("<!-- BEGIN generated by `python -m mas_orchestra.environment --write docs/reference/environment.md`"
                   " -->")
END_GENERATED = "<!-- END generated -->"


def reference_tables() -> str:
    """The generated part of ``docs/reference/environment.md``: one table per group of :data:`VARIABLES`, then
    :data:`EXTERNAL`, between :data:`BEGIN_GENERATED` and :data:`END_GENERATED`.

    Returns:
        The Markdown, markers included.
    """
    lines = [BEGIN_GENERATED]
    for group in dict.fromkeys(v.group for v in VARIABLES):
        lines += ["", f"## {group}", "", *_table(tuple(v for v in VARIABLES if v.group == group))]
    lines += ["", f"## {EXTERNAL[0].group}", "", *_table(EXTERNAL), "", END_GENERATED]
    return "\n".join(lines)


def generated_part(page: str) -> str:
    """The generated part of a reference page (markers included; empty when the markers are missing).

    Args:
        page: The page's text.
    """
    start, end = page.find(BEGIN_GENERATED), page.find(END_GENERATED)
    return page[start:end + len(END_GENERATED)] if 0 <= start < end else ""


def write_reference(path: str | os.PathLike[str]) -> None:
    """Replace the generated part of the reference page at ``path`` with :func:`reference_tables`.

    Args:
        path: The reference page.

    Raises:
        ValueError: the page has no generated part to replace (its markers were removed).
    """
    page = Path(path).read_text(encoding="utf-8")
    old = generated_part(page)
    if not old:
        raise ValueError(f"{path} has no {BEGIN_GENERATED} ... {END_GENERATED} part to replace")
    Path(path).write_text(page.replace(old, reference_tables()), encoding="utf-8")


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--write"] and len(sys.argv) == 3:
        write_reference(sys.argv[2])
    else:
        print(reference_tables())
