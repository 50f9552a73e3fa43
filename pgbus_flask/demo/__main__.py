"""``python -m pgbus_flask.demo``: the same as ``pgbus-demo``."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
