"""Documented import path of token prices: re-exports :mod:`mas_orchestra.runtime.pricing`.

The README, the training README or the notebooks import from here; new code imports from the new module.
"""

from mas_orchestra.runtime.pricing import cost_usd, price_of, register_price

__all__ = [
    "cost_usd",
    "price_of",
    "register_price",
]
