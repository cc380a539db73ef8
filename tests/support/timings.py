"""Timings tests pass where production passes a setting."""

from __future__ import annotations

from datetime import timedelta

# PAYCORE_REMINDER_INTERVAL_S's default: the first reminder of an escalation raised in a test.
REMINDER_INTERVAL = timedelta(seconds=900)
