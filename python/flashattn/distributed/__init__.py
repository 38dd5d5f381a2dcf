"""Context parallelism."""
