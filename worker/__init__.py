"""The RQ worker side of pgbus-flask, installed as ``pgbus_flask.worker``."""
