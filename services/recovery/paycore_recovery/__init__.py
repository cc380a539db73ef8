"""The recovery worker: the reference's recovery loop and the reminder job.

:mod:`.loop` reads top to bottom like the reference's pseudo-code; :mod:`.leases`
holds its conditional writes (claim, finish, escalate-and-finish, close
never-sent, send intent); :mod:`.reminders` drives open escalations.
"""
