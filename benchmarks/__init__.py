"""Benchmarks: ``python -m benchmarks [--quick]`` runs them all and prints one table with ratios."""
