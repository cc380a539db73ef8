"""Payment providers, behind one interface.

- :mod:`paycore.providers.base`: the :class:`~paycore.providers.base.Provider` protocol
  the core depends on, and the neutral data it trades in (stored request, lookup
  results, notifications and their keys, capabilities);
- :mod:`paycore.providers.registry`: the one factory (:func:`~paycore.providers.registry.for_accounts`)
  and the notification format of a stored event's provider;
- :mod:`paycore.providers.cardco`: Cardco.

This package's ``__init__`` imports nothing, so importing the interface never loads a provider.
"""
