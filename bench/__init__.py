"""Benchmarks of pgbus-flask (see docs/benchmarks.md); run them as ``python -m bench.NAME``."""
