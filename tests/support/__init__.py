"""The stacks tests run (checkout, webhooks, recovery) and their helpers.

Real databases and servers on free ports come from ``harness/``, which the benchmarks share.
"""
