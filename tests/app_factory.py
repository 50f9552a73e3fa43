"""A Flask app for worker tests: ``pgbus-worker --app tests.app_factory:create_app``."""

from __future__ import annotations

import os

from flask import Flask

from pgbus_flask import PgBus


def create_app() -> Flask:
    app = Flask("pgbus_worker_test_app")
    app.config.update(
        PGBUS_DATABASE_URL=os.environ["TEST_APP_DATABASE_URL"],
        PGBUS_REDIS_URL=os.environ["TEST_APP_REDIS_URL"],
        PGBUS_IMPORT="tests.workflows",
    )
    PgBus(app)
    return app
