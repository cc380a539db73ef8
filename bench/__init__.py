"""Benchmarks: each prints a result beside a baseline measured in the same run."""
