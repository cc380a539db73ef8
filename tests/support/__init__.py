"""Shared test infrastructure: real PostgreSQL databases, real HTTP servers."""
