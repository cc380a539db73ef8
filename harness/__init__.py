"""What the tests and the benchmarks both stand on: real PostgreSQL and real servers on free ports.

Development-only: nothing under ``libs/`` or ``services/`` imports it. ``tests/``
and ``bench/`` import it; neither imports the other.
"""
