"""Payment providers, behind one interface.

- :mod:`paycore.providers.base`: the :class:`~paycore.providers.base.Provider` protocol
  the core depends on, and the neutral data it trades in (stored request, lookup
  results, notifications and their keys, capabilities);
- :mod:`paycore.providers.registry`: the one factory (:func:`~paycore.providers.registry.for_accounts`)
  and the notification format of a stored event's provider;
- :mod:`paycore.providers.http` and :mod:`paycore.providers.adapter`: what every adapter does
  the same way (the no-retry pool, one send under a budget, the stored request's rules; the
  client's accounts, budgets, create skeleton, logs and webhook side), written once;
- :mod:`paycore.providers.cardco`, :mod:`paycore.providers.stripe`,
  :mod:`paycore.providers.adyen`: one package per provider (request, wire, client, events), whose
  ``provider`` module exports ``PROVIDER``, everything paycore knows of it
  (:class:`~paycore.providers.package.ProviderPackage`); the registry lists them.

This package's ``__init__`` imports nothing, so importing the interface never loads a provider.
"""
