"""Compiled graphs exposed by ``langgraph.json`` (baselines on the configured sub-agent model)."""

from __future__ import annotations

import os

from graphs.baselines import baseline_graph
from graphs.examples import example_spec
from mas_orchestra.compile import compile_spec

_MODEL = os.environ.get("MAS_SUBAGENT", "embedded")

cot = baseline_graph("cot", _MODEL)
sc = baseline_graph("sc", _MODEL)
reflexion = baseline_graph("reflexion", _MODEL)
debate = baseline_graph("debate", _MODEL)
diamond = compile_spec(example_spec("diamond"), _MODEL)
