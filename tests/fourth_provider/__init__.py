"""Payzo: a fourth provider as a test fixture only (never shipped), to show what one costs.

``provider.py`` is its package (what ``paycore/providers/<name>/`` would hold), ``sandbox.py``
its wire served as a real HTTP server; ``tests/provider_conformance/conftest.py`` registers it
in one line and the shared conformance suite runs it with the three shipped providers.
"""
