"""One conformance suite, run for every provider package the registry knows."""
