"""``{name:id}`` in a console route: a row id (a PostgreSQL bigint), at most 18 digits.

Starlette's ``int`` takes any number of digits, and one past bigint's range reached the query
and failed there as a 500 (found by tests/openapi's fuzzing). An id no row can have is a
404 from the router instead, like any other path that names nothing.
"""

from __future__ import annotations

from starlette.convertors import Convertor, register_url_convertor

MAX_ID = 10**18 - 1  # every bigint id the sequences hand out for a long time to come


class RowId(Convertor[int]):
    regex = "[0-9]{1,18}"

    def convert(self, value: str) -> int:
        return int(value)

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("id", RowId())
