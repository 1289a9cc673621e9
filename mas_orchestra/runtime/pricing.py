"""Token prices per model, for the cost column of every run (DESIGN §9's efficiency table)."""

from __future__ import annotations

import json
import threading
from importlib import resources

from agents.base import ModelUsage

__all__ = ["cost_usd", "price_of", "register_price"]

_lock = threading.Lock()
_prices: dict[str, tuple[float, float]] = {}


def _load() -> dict[str, tuple[float, float]]:
    if not _prices:
        raw = json.loads(resources.files("mas_orchestra.runtime").joinpath("prices.json").read_text("utf-8"))
        with _lock:
            for name, value in raw.items():
                if not name.startswith("_"):
                    _prices.setdefault(name, (float(value[0]), float(value[1])))
    return _prices


def register_price(model: str, input_per_mtok: float, output_per_mtok: float) -> None:
    """Set the price of ``model`` in USD per million input / output tokens.

    Args:
        model: The model name as usage reports it (e.g. ``gpt-4o-mini``).
        input_per_mtok: USD per million input tokens.
        output_per_mtok: USD per million output tokens.

    Raises:
        ValueError: A negative price.
    """
    if input_per_mtok < 0 or output_per_mtok < 0:
        raise ValueError("prices must be >= 0")
    _load()
    with _lock:
        _prices[model] = (float(input_per_mtok), float(output_per_mtok))


def price_of(model: str) -> tuple[float, float] | None:
    """Price of a model name: exact, then without a provider prefix (``openai/x`` → ``x``).

    Args:
        model: The model name.

    Returns:
        ``(input, output)`` USD per million tokens (``(0, 0)`` for local models), or ``None`` when unknown.
    """
    prices = _load()
    if model in prices:
        return prices[model]
    short = model.rsplit("/", 1)[-1]
    if short in prices:
        return prices[short]
    if model.startswith(("hf:", "/")) or "smollm" in model.lower():
        return (0.0, 0.0)  # local models
    return None


def cost_usd(by_model: dict[str, ModelUsage]) -> tuple[float, list[str]]:
    """Total cost and the model names without a price (counted as 0).

    Args:
        by_model: Tokens per model name.

    Returns:
        ``(USD, sorted names of unpriced models)``.
    """
    total, unpriced = 0.0, []
    for name, used in by_model.items():
        price = price_of(name)
        if price is None:
            unpriced.append(name)
            continue
        total += used.input_tokens * price[0] / 1e6 + used.output_tokens * price[1] / 1e6
    return total, sorted(unpriced)
