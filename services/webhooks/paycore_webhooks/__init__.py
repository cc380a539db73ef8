"""The webhook intake service: verified, deduplicated, conditional notification handling.

:mod:`.handler` is the reference's notification handler, top to bottom;
:mod:`.app` wires it to ``POST /webhooks/<provider>`` (``/webhooks/cardco``).
"""
