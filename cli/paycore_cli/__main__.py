"""``python -m paycore_cli``: how ``paycore up`` and the benchmarks start each service."""

from paycore_cli.main import main

raise SystemExit(main())
