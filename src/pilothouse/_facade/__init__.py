"""The facade's halves; :mod:`pilothouse.api` is their public address.

One module per half (:mod:`.query`, :mod:`.command`, :mod:`.catalog`,
:mod:`.keys`), plus what the command half builds on: ad-hoc runs
(:mod:`.adhoc`), target ids (:mod:`.targets`) and the store writes made
outside a turn (:mod:`.records`).
"""
