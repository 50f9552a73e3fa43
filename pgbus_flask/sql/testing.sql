-- What pgbus_flask/testing.py and the SQLAlchemy integration (pgbus_flask/orm.py) run besides the
-- library's own statements.

-- name: database_identity
-- Which server and database a connection is on (two connections on the same one share a transaction's rows only if both are).
SELECT system_identifier, current_database() FROM pg_control_system();
