"""``paycore chaos``: the whole system under load, provider faults, kills and a database crash.

The matrix tests prove each rule alone; this run proves they hold together. It
starts every service as a real process on embedded PostgreSQL and the local
broker (:mod:`.stack`), drives storefront clients through them (:mod:`.load`)
while the sandbox injects faults drawn from the seed (:mod:`.faults`) and
services and the database are killed and restarted (:mod:`.kills`), then stops
the faults, lets recovery settle and checks every money invariant against the
sandbox's ledger and the database (:mod:`.invariants`), and writes a table, a
JSON report and a PNG timeline (:mod:`.report`). :mod:`.run` is the whole run,
top to bottom; :mod:`.model` holds what the pieces pass each other.

Development only: it needs the embedded servers and the sandbox, never a
production deployment.
"""
