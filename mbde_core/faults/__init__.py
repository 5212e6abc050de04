"""Sensor-fault injection and scoring for ``mbde bench faults`` (:mod:`.kinds`, :mod:`.score`)."""
