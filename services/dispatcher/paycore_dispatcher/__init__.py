"""The dispatcher: the outbox relay to Kafka, the reference consumers, and alert delivery.

:mod:`.relay` orders and publishes outbox rows (eligibility before claim);
:mod:`.worker` runs relays with metrics and retention; :mod:`.alerts` delivers
``ops.alerts`` to Slack or PagerDuty; :mod:`.demo_consumers` are the reference
consumers built on :mod:`paycore.consumer`. See ``docs/dispatcher.md``.
"""
