"""Sub-agent model pools and prices from the training config.

``subagent: 'fast=<model>,strong=<model>'`` (YAML: a mapping) names a pool: every agent kind gets a ``model``
parameter naming an entry (:func:`mas_orchestra.offers.with_pool`), so the orchestrator chooses which model runs
each agent. ``subagent_defaults: 'debate=strong'`` picks an entry per kind when the orchestrator names none, and
``prices: 'fast=1:1,strong=5:5'`` prices the entries (USD per million input:output tokens) for
``cost_metric: cost_usd``. This module reads those strings (:func:`pool_of`, :func:`pairs`, :func:`price_table`)
and builds the reward's sub-agent and registry from them (:func:`pooled_subagents`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["MAPPING_FIELDS", "mapping_text", "pairs", "pool_of", "pooled_subagents", "price_table"]

#: Config fields a YAML recipe may give as a mapping (written back as ``key=value,...``).
MAPPING_FIELDS = ("subagent", "subagent_defaults", "prices")


def pairs(text: str | None, form: str) -> dict[str, str]:
    """``'a=1,b=2'`` as ``{'a': '1', 'b': '2'}``.

    Args:
        text: comma-separated ``KEY=VALUE`` items (``None`` or empty: none).
        form: what an item should look like, for the error message (e.g. ``KIND=ENTRY``).

    Returns:
        The items in order.

    Raises:
        ValueError: an item without ``=``, an empty key or value, or a key given twice.
    """
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"{item.strip()!r} is not {form} (comma-separated)")
        if key.strip() in out:
            raise ValueError(f"{key.strip()!r} given twice")
        out[key.strip()] = value.strip()
    return out


def pool_of(subagent: str) -> dict[str, str] | None:
    """The pool ``{name: model string}`` a ``subagent`` setting names, or ``None`` for one model.

    Args:
        subagent: One model string, or ``NAME=MODEL`` items joined by commas.

    Raises:
        PoolError: a bad pool name, a name given twice, or one model mixed with named ones.
    """
    from mas_orchestra.offers import subagent_from_args

    items = [item.strip() for item in subagent.split(",")] if "=" in subagent else [subagent]
    pool = subagent_from_args(items)
    return pool if isinstance(pool, dict) else None


def price_table(text: str | None) -> dict[str, tuple[float, float]]:
    """``prices`` as ``{name: (USD per million input tokens, USD per million output tokens)}``.

    Args:
        text: ``NAME=IN:OUT`` items joined by commas (one number stands for both); ``None``: no prices.

    Raises:
        ValueError: a price that is not ``IN:OUT`` (or one number) of non-negative numbers.
    """
    out: dict[str, tuple[float, float]] = {}
    for name, value in pairs(text, "NAME=IN:OUT").items():
        parts = value.split(":")
        try:
            pair = (float(parts[0]), float(parts[-1])) if len(parts) <= 2 else None
        except ValueError:
            pair = None
        if pair is None or min(pair) < 0:
            raise ValueError(f"price of {name!r} is {value!r}; write IN:OUT in USD per million tokens, e.g. 1:1")
        out[name] = pair
    return out


def mapping_text(value: Any) -> Any:
    """A YAML mapping (``{fast: m1, strong: m2}``, prices as ``'1:1'`` or ``[1, 1]``) as ``key=value,...``.

    Args:
        value: A config value; anything but a dict is returned unchanged.

    Returns:
        The mapping as text, list values joined by ``:``.
    """
    if not isinstance(value, dict):
        return value

    def one(item: Any) -> str:
        return ":".join(str(v) for v in item) if isinstance(item, (list, tuple)) else str(item)

    return ",".join(f"{k}={one(v)}" for k, v in value.items())


def pooled_subagents(cfg: Any, registry: Any, resolve: Callable[[str], Any]) -> tuple[Any, Any]:
    """The reward's default sub-agent model and the offered registry for a training config.

    With a pool in ``cfg.subagent`` every kind of ``registry`` gets a ``model`` parameter naming a pool entry;
    ``cfg.prices`` are registered (:func:`mas_orchestra.runtime.pricing.register_price`) for the pool's models, or
    under the given model name.

    Args:
        cfg: the training config (``subagent``, ``subagent_defaults``, ``prices``, ``cost_metric``).
        registry: the offered agent kinds.
        resolve: turns a model string into a model (with the config's token cap).

    Returns:
        ``(model, registry)``: the first pool model (or the one sub-agent) and the registry to offer.

    Raises:
        PoolError: ``subagent_defaults`` without a pool or naming no entry, or (with ``cost_metric: cost_usd``)
            a pool model without a price.
    """
    from agents.base import model_name_of
    from mas_orchestra.offers import PoolError, with_pool
    from mas_orchestra.runtime.pricing import price_of, register_price

    models = {name: resolve(text) for name, text in (pool_of(cfg.subagent) or {}).items()}
    for name, (price_in, price_out) in price_table(cfg.prices).items():
        register_price(model_name_of(models[name]) if name in models else name, price_in, price_out)
    if not models:
        if cfg.subagent_defaults:
            raise PoolError("subagent_defaults needs a pool: subagent: 'fast=<model>,strong=<model>'")
        return resolve(cfg.subagent), registry
    if cfg.cost_metric == "cost_usd":
        missing = [f"{name} ({model_name_of(m)})" for name, m in models.items() if price_of(model_name_of(m)) is None]
        if missing:
            raise PoolError(f"cost_metric cost_usd: no price for pool model(s) {', '.join(missing)}; give them in "
                            "prices, e.g. prices: 'fast=1:1,strong=5:5' (USD per million input:output tokens)")
    return next(iter(models.values())), with_pool(registry, models, pairs(cfg.subagent_defaults, "KIND=ENTRY"))
