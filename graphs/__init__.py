"""Ready-made graphs: single-agent baselines, example specs, and the end-to-end orchestrate-and-run graph."""

import mas_orchestra  # noqa: F401  -- first: it checks that `agents` is our package
from graphs.baselines import BASELINES, baseline_graph, baseline_spec
from graphs.examples import example_names, example_spec

__all__ = ["BASELINES", "baseline_graph", "baseline_spec", "example_names", "example_spec"]
