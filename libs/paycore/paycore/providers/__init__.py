"""Payment-provider adapters (:mod:`paycore.providers.cardco`)."""
