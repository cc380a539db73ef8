"""HTTP pieces every paycore service shares: problem details, bounded JSON bodies, metrics."""
