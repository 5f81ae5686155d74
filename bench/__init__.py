"""Benchmarks (run as scripts: `python bench/membound.py`), and the one JSON schema their
results share (`bench.results`) with its regression gate (`python -m bench.compare`)."""
