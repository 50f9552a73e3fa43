"""What a run is doing, in one badge and one sentence: see :mod:`pgbus_flask.present.state`."""

from __future__ import annotations

from ..present.state import BADGE_TONES, NEXT_KEYS, Presentation, batch_name, present, stuck_reason

__all__ = ["BADGE_TONES", "NEXT_KEYS", "Presentation", "batch_name", "present", "stuck_reason"]
