"""The checkout service: orders, ``POST /orders/{id}/payment`` and its status.

Modules: :mod:`.app` (wiring), :mod:`.routes` (HTTP), :mod:`.payments` (the pay
flow of the reference's checkout endpoint), :mod:`.inbound_idempotency` (the
optional ``Idempotency-Key`` layer), :mod:`.auth` (JWT customers).
"""
