"""localstripe, started with its state in a file of the caller's choosing.

Usage: ``python tests/support/localstripe_server.py STATE_FILE --port PORT --from-scratch``

localstripe (1.15.10) keeps its whole store in ``/tmp/localstripe.pickle``, a path it
hard-codes (``localstripe.resources.Store``) and writes on every POST: two suites on one
machine would share it, and one user's file would make another's writes fail. This
launcher points the store's two file methods at ``STATE_FILE`` (the tests give each run a
private directory), then starts localstripe's own server unchanged.

Two more changes, the only ones to what localstripe answers, each a documented field it
refuses (``400 Unexpected …``) that paycore always sends: a PaymentIntent's ``description``
(checkout's ``order <id>``), which the launcher lets a PaymentIntent take and keep; and a
capture's ``metadata`` (paycore's ``metadata[paycore_capture_reference]``), which the
launcher merges into the intent's before the capture runs, as Stripe does (so the
``payment_intent.succeeded`` it sends shows it). And one route: ``GET
/v1/balance_transactions``, Stripe's path of the balance transactions localstripe lists only
at ``/v1/balance/history`` (its own route for that path refuses every filter), answering
localstripe's own list (newest first, ``limit``/``starting_after`` as it pages) filtered by
``created`` (``[gte]``/``[gt]``/``[lte]``/``[lt]`` or exact, unix seconds) and ``type`` after
listing; ``expand[]=data.source`` is localstripe's own expansion (the Charge or Refund object).
Any other parameter is still ``400 Unexpected …``. Nothing else differs: localstripe still
ignores ``Idempotency-Key`` and ``Stripe-Version``, has no Search, and signs its webhooks
itself.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

from localstripe import resources


def _private_state(path: str) -> None:
    def load(store: resources.Store) -> None:
        try:
            with open(path, "rb") as f:
                old = pickle.load(f)  # our own file, written below
        except FileNotFoundError:
            return
        store.clear()
        store.update(old)

    def dump(store: resources.Store) -> None:
        with open(path, "wb") as f:
            pickle.dump(store, f, protocol=pickle.HIGHEST_PROTOCOL)

    resources.Store.try_load_from_disk = load
    resources.Store.dump_to_disk = dump


def _payment_intents_take_a_description() -> None:
    original = resources.PaymentIntent.__init__

    def init(self: resources.PaymentIntent, description: str | None = None, **kwargs: Any) -> None:
        original(self, **kwargs)
        self.description = description

    resources.PaymentIntent.__init__ = init


def _captures_take_metadata() -> None:
    capture = resources.PaymentIntent._api_capture

    def capture_with_metadata(id: str, metadata: dict[str, str] | None = None, **kwargs: Any) -> Any:
        if metadata is None:
            return capture(id, **kwargs)
        intent = resources.PaymentIntent._api_retrieve(id)
        before = dict(intent.metadata or {})
        intent.metadata = {**before, **metadata}
        try:
            return capture(id, **kwargs)
        except Exception:
            intent.metadata = before  # a refused capture changes nothing
            raise

    # The server routes its extra endpoints from this list when it is imported (below).
    resources.extra_apis[:] = [(method, url, capture_with_metadata if func == capture else func)
                               for method, url, func in resources.extra_apis]


_CREATED_BOUNDS = {"gte": int.__ge__, "gt": int.__gt__, "lte": int.__le__, "lt": int.__lt__}


def _created_matches(created: int, bounds: Any) -> bool:
    """Stripe's ``created`` filter: ``{"gte": "…", …}`` or one exact time (form strings)."""
    if not isinstance(bounds, dict):
        return created == int(bounds)
    for name, value in bounds.items():
        if name not in _CREATED_BOUNDS:
            raise resources.UserError(400, f"Unexpected created[{name}]")
        if not _CREATED_BOUNDS[name](created, int(value)):
            return False
    return True


def _balance_transactions_at_stripes_path() -> None:
    url = "/v1/balance_transactions"

    def list_all(limit: Any = None, starting_after: Any = None, created: Any = None,
                 type: Any = None, **kwargs: Any) -> Any:
        if kwargs:
            raise resources.UserError(400, "Unexpected " + ", ".join(kwargs))
        try:
            listed = resources.BalanceTransaction._api_list_all(url, limit, starting_after)
            # Filtered before the page is cut: List pages lazily, when its data is read.
            listed._list = [txn for txn in listed._list
                            if (created is None or _created_matches(txn.created, created))
                            and type in (None, txn.type)]
        except ValueError:
            raise resources.UserError(400, "Bad request") from None
        return listed

    # Extra routes are added before localstripe's generic ones, so this one answers the path.
    resources.extra_apis.append(("GET", url, list_all))


def main() -> None:
    _private_state(sys.argv.pop(1))
    _payment_intents_take_a_description()
    _captures_take_metadata()
    _balance_transactions_at_stripes_path()
    from localstripe import server  # after the patches: it builds its routes on import

    server.start()  # reads --port and --from-scratch from sys.argv


if __name__ == "__main__":
    main()
