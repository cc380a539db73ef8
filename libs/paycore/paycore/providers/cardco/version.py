"""Cardco's API version: what an account is stamped with unless configured otherwise.

Its own module, importing nothing: :class:`paycore.providers.package.ProviderAccountConfig` takes
it as the default of an account built without one (Cardco was paycore's first provider).
"""

from typing import Final

API_VERSION: Final = "2026-11-01"
