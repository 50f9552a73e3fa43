-- 0017: flow control (docs/flow-control.md): concurrency limits per key, rate limits, priorities.
--
-- A concurrency slot is a row of pgbus_limit_slots, numbered from 1 per (limit, key), made when a
-- claim or a grant needs one more (never more than the capacity: a key has as many rows as it ever
-- had slots held at once; the sweep deletes the rows of keys nobody holds or waits for). A run-level limit's slot is held by a run (holder_run) from the
-- claim of its step until it stops being ready or running, or is ready with its step due later; a
-- step-level limit's slot is held by a step attempt (holder_step) until it leaves scheduled or
-- in_progress. The holder's own row says it holds (holds_slot), and a trigger on it gives the slots
-- back in the transaction that moves it, whichever code moves it: nothing can skip it. The slot then
-- goes at once to the waiter first in line (highest priority, then oldest), in that same
-- transaction; the ids of the steps it woke are left in the transaction's setting pgbus.woken for
-- the runner to send after commit (runner/limits.py).

ALTER TABLE pgbus_workflows
    ADD COLUMN priority integer,                          -- start(..., priority=); NULL: the class's or step's
    ADD COLUMN limit_name text,                           -- the class's concurrency limit, its key below
    ADD COLUMN limit_key text,
    ADD COLUMN holds_slot boolean NOT NULL DEFAULT false; -- holds its run-level limit's slot

ALTER TABLE pgbus_workflow_steps
    ADD COLUMN holds_slot boolean NOT NULL DEFAULT false, -- holds its step-level limit's slot
    ADD COLUMN blocked_on text,                           -- the limit or rate it waits for (its run waits)
    ADD COLUMN blocked_key text,                          -- the limit's key; NULL: blocked_on names a rate
    ADD COLUMN blocked_since timestamptz,                 -- kept once woken: it is then first in line
    ADD COLUMN blocked_priority integer;

-- Each limit and rate as last declared by a worker (capacity, kind, window): what the grants and
-- the Limits panel read.
CREATE TABLE pgbus_limits (
    name        text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('run', 'step', 'rate')),
    capacity    integer NOT NULL CHECK (capacity > 0),
    per_seconds double precision,                           -- a rate's window
    -- a rate: the starts of its last window, oldest first, and what its wake-up promised
    starts      timestamptz[] NOT NULL DEFAULT '{}',
    promised    integer NOT NULL DEFAULT 0,
    promised_until timestamptz,
    wake_at     timestamptz,                                -- the rate's wake-up job is due then
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, name)
);

CREATE TABLE pgbus_limit_slots (
    limit_name  text NOT NULL,
    limit_key   text NOT NULL,
    slot        integer NOT NULL,
    holder_run  uuid,
    holder_step bigint,
    taken_at    timestamptz,
    PRIMARY KEY (limit_name, limit_key, slot),
    CHECK (holder_run IS NULL OR holder_step IS NULL)
);
CREATE INDEX pgbus_limit_slots_run ON pgbus_limit_slots (holder_run) WHERE holder_run IS NOT NULL;
CREATE INDEX pgbus_limit_slots_step ON pgbus_limit_slots (holder_step) WHERE holder_step IS NOT NULL;

-- The waiters of each limit and rate, first in line first.
CREATE INDEX pgbus_workflow_steps_blocked ON pgbus_workflow_steps
    (blocked_on, blocked_key, blocked_priority DESC, id) WHERE blocked_on IS NOT NULL AND status = 'scheduled';
-- The runs of a class limit's key that hold or wait for a slot (on_busy refuse and replace).
CREATE INDEX pgbus_workflows_limit_key ON pgbus_workflows (limit_name, limit_key)
    WHERE limit_name IS NOT NULL AND status IN ('ready', 'running', 'waiting');

-- The advisory lock of one (limit, key): every take, give-back and grant of its slots holds it.
CREATE FUNCTION pgbus_limit_lock(name text, key text) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended('pgbus-limit' || chr(31) || name || chr(31) || COALESCE(key, ''), 0)
$$;

-- Give the free slots of (name, key) to its waiters, first in line first (the caller holds the key's
-- lock). A waiter whose run or step another transaction holds is skipped (SKIP LOCKED: no deadlock);
-- that transaction's own give-back or the sweep grants it. Returns how many were woken.
CREATE FUNCTION pgbus_grant_slots(p_name text, p_key text) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    lim record;
    free_slot integer;
    waiter record;
    woken integer := 0;
BEGIN
    SELECT kind, capacity INTO lim FROM pgbus_limits WHERE name = p_name AND kind IN ('run', 'step')
      ORDER BY kind LIMIT 1;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    LOOP
        -- a free slot: a row given back, else a new row while fewer than the capacity exist
        SELECT slot INTO free_slot FROM pgbus_limit_slots
         WHERE limit_name = p_name AND limit_key = p_key AND slot <= lim.capacity
           AND holder_run IS NULL AND holder_step IS NULL ORDER BY slot LIMIT 1;
        IF NOT FOUND THEN
            SELECT COALESCE(max(slot), 0) + 1 INTO free_slot FROM pgbus_limit_slots
             WHERE limit_name = p_name AND limit_key = p_key;
            EXIT WHEN free_slot > lim.capacity;
            INSERT INTO pgbus_limit_slots (limit_name, limit_key, slot) VALUES (p_name, p_key, free_slot);
        END IF;
        SELECT s.id, s.workflow_id, s.step_name, s.attempt, s.sends, s.scheduled_at INTO waiter
          FROM pgbus_workflow_steps s JOIN pgbus_workflows w ON w.workflow_id = s.workflow_id
         WHERE s.blocked_on = p_name AND s.blocked_key = p_key AND s.status = 'scheduled' AND w.status = 'waiting'
         ORDER BY s.blocked_priority DESC, s.id LIMIT 1 FOR UPDATE OF s, w SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        UPDATE pgbus_limit_slots SET taken_at = now(),
               holder_run = CASE WHEN lim.kind = 'run' THEN waiter.workflow_id END,
               holder_step = CASE WHEN lim.kind = 'step' THEN waiter.id END
         WHERE limit_name = p_name AND limit_key = p_key AND slot = free_slot;
        UPDATE pgbus_workflow_steps SET blocked_on = NULL, blocked_key = NULL, holds_slot = (lim.kind = 'step'),
               sends = sends + 1, job_id = 'pgbus-step-' || id || '-send' || (sends + 1), enqueued_at = now(),
               scheduled_at = now()
         WHERE id = waiter.id;
        UPDATE pgbus_workflows SET status = 'ready', updated_at = now(), holds_slot = holds_slot OR lim.kind = 'run'
         WHERE workflow_id = waiter.workflow_id;
        INSERT INTO pgbus_workflow_events (workflow_id, event, actor, step_id, step_name, attempt, details)
        VALUES (waiter.workflow_id, 'slot_granted', 'system', waiter.id, waiter.step_name, waiter.attempt,
                jsonb_build_object('limit', p_name, 'key', p_key));
        PERFORM pgbus_workflow_attention(waiter.workflow_id);
        PERFORM set_config('pgbus.woken', COALESCE(NULLIF(current_setting('pgbus.woken', true), ''), '')
                           || waiter.id || ',', true);
        woken := woken + 1;
    END LOOP;
    RETURN woken;
END
$$;

-- Give back every slot a run or a step attempt holds (one of the two ids is NULL), and grant each to
-- the next in line.
CREATE FUNCTION pgbus_give_back_slots(p_run uuid, p_step bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    held record;
BEGIN
    FOR held IN SELECT limit_name, limit_key FROM pgbus_limit_slots
                 WHERE (p_run IS NOT NULL AND holder_run = p_run) OR (p_step IS NOT NULL AND holder_step = p_step)
                 ORDER BY pgbus_limit_lock(limit_name, limit_key) LOOP
        PERFORM pg_advisory_xact_lock(pgbus_limit_lock(held.limit_name, held.limit_key));
        UPDATE pgbus_limit_slots SET holder_run = NULL, holder_step = NULL, taken_at = NULL
         WHERE limit_name = held.limit_name AND limit_key = held.limit_key
           AND ((p_run IS NOT NULL AND holder_run = p_run) OR (p_step IS NOT NULL AND holder_step = p_step));
        PERFORM pgbus_grant_slots(held.limit_name, held.limit_key);
    END LOOP;
END
$$;

CREATE FUNCTION pgbus_run_gives_back() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgbus_give_back_slots(OLD.workflow_id, NULL);
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    NEW.holds_slot := false;
    RETURN NEW;
END
$$;

CREATE FUNCTION pgbus_step_gives_back() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgbus_give_back_slots(NULL, OLD.id);
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    NEW.holds_slot := false;
    RETURN NEW;
END
$$;

-- A run gives its slot back when it stops being ready or running (waits, pauses, ends), when it is
-- ready with its step due later (a delay, a backoff), or when its holds_slot is cleared.
CREATE TRIGGER pgbus_run_gives_back BEFORE UPDATE ON pgbus_workflows FOR EACH ROW
    WHEN (OLD.holds_slot AND (NOT NEW.holds_slot OR NEW.status NOT IN ('ready', 'running')
          OR (NEW.status = 'ready' AND NEW.attention_since > now() + interval '1 second')))
    EXECUTE FUNCTION pgbus_run_gives_back();
CREATE TRIGGER pgbus_run_gives_back_deleted BEFORE DELETE ON pgbus_workflows FOR EACH ROW
    WHEN (OLD.holds_slot) EXECUTE FUNCTION pgbus_run_gives_back();

-- A step attempt gives its slot back when it leaves scheduled and in_progress (completed, failed,
-- waiting, skipped, cancelled) or when its holds_slot is cleared.
CREATE TRIGGER pgbus_step_gives_back BEFORE UPDATE ON pgbus_workflow_steps FOR EACH ROW
    WHEN (OLD.holds_slot AND (NOT NEW.holds_slot OR NEW.status NOT IN ('scheduled', 'in_progress')))
    EXECUTE FUNCTION pgbus_step_gives_back();
CREATE TRIGGER pgbus_step_gives_back_deleted BEFORE DELETE ON pgbus_workflow_steps FOR EACH ROW
    WHEN (OLD.holds_slot) EXECUTE FUNCTION pgbus_step_gives_back();

-- A granted step whose run is paused before it ran gives its slot back too (it stays scheduled).
CREATE FUNCTION pgbus_paused_run_gives_back() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgbus_workflow_steps SET holds_slot = false WHERE workflow_id = NEW.workflow_id AND holds_slot;
    RETURN NULL;
END
$$;
CREATE INDEX pgbus_workflow_steps_holding ON pgbus_workflow_steps (workflow_id) WHERE holds_slot;
CREATE TRIGGER pgbus_paused_run_gives_back AFTER UPDATE ON pgbus_workflows FOR EACH ROW
    WHEN (NEW.status = 'paused' AND OLD.status = 'ready') EXECUTE FUNCTION pgbus_paused_run_gives_back();

-- Take the slots a step attempt needs at its claim, all or none: p_names, p_keys, p_caps and p_kinds
-- ('run' or 'step') describe them. Every key's lock is taken first, in one order. A slot the run or
-- the attempt already holds (granted) counts as taken. Returns NULL when all are held now; else
-- {name, key} of the first busy one, after the attempt was put in line for it (blocked_on, its run
-- waiting) and every slot it held given back. A claim behind waiters queues behind them even when a
-- slot is free (a capacity raised since): the grant then picks the first in line.
CREATE FUNCTION pgbus_take_slots(p_step bigint, p_run uuid, p_names text[], p_keys text[], p_caps integer[],
                                 p_kinds text[], p_priority integer) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    lock_id bigint;
    held boolean;
    taken integer;
    busy integer;
BEGIN
    FOR lock_id IN SELECT DISTINCT pgbus_limit_lock(p_names[j], p_keys[j]) FROM generate_subscripts(p_names, 1) j
                   ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(lock_id);
    END LOOP;
    FOR i IN 1 .. cardinality(p_names) LOOP
        IF NOT EXISTS (SELECT 1 FROM pgbus_limits WHERE kind = p_kinds[i] AND name = p_names[i]
                                                      AND capacity = p_caps[i]) THEN
            INSERT INTO pgbus_limits (name, kind, capacity) VALUES (p_names[i], p_kinds[i], p_caps[i])
            ON CONFLICT (kind, name) DO UPDATE SET capacity = EXCLUDED.capacity, updated_at = now();
        END IF;
        IF p_kinds[i] = 'run' THEN
            held := EXISTS (SELECT 1 FROM pgbus_limit_slots WHERE holder_run = p_run AND limit_name = p_names[i]);
        ELSE
            held := EXISTS (SELECT 1 FROM pgbus_limit_slots WHERE holder_step = p_step AND limit_name = p_names[i]);
        END IF;
        CONTINUE WHEN held;
        taken := NULL;
        IF NOT EXISTS (SELECT 1 FROM pgbus_workflow_steps s WHERE s.blocked_on = p_names[i]
                          AND s.blocked_key = p_keys[i] AND s.status = 'scheduled' AND s.id <> p_step) THEN
            UPDATE pgbus_limit_slots SET taken_at = now(),
                   holder_run = CASE WHEN p_kinds[i] = 'run' THEN p_run END,
                   holder_step = CASE WHEN p_kinds[i] = 'step' THEN p_step END
             WHERE limit_name = p_names[i] AND limit_key = p_keys[i] AND slot = (
                   SELECT slot FROM pgbus_limit_slots WHERE limit_name = p_names[i] AND limit_key = p_keys[i]
                      AND slot <= p_caps[i] AND holder_run IS NULL AND holder_step IS NULL ORDER BY slot LIMIT 1)
            RETURNING slot INTO taken;
            IF taken IS NULL THEN  -- none given back: a new row while fewer than the capacity exist
                SELECT COALESCE(max(slot), 0) + 1 INTO taken FROM pgbus_limit_slots
                 WHERE limit_name = p_names[i] AND limit_key = p_keys[i];
                IF taken <= p_caps[i] THEN
                    INSERT INTO pgbus_limit_slots (limit_name, limit_key, slot, holder_run, holder_step, taken_at)
                    VALUES (p_names[i], p_keys[i], taken, CASE WHEN p_kinds[i] = 'run' THEN p_run END,
                            CASE WHEN p_kinds[i] = 'step' THEN p_step END, now());
                ELSE
                    taken := NULL;
                END IF;
            END IF;
        END IF;
        IF taken IS NULL THEN
            busy := i;
            EXIT;
        END IF;
        IF p_kinds[i] = 'run' THEN
            UPDATE pgbus_workflows SET holds_slot = true WHERE workflow_id = p_run AND NOT holds_slot;
        ELSE
            UPDATE pgbus_workflow_steps SET holds_slot = true WHERE id = p_step AND NOT holds_slot;
        END IF;
    END LOOP;
    IF busy IS NULL THEN
        UPDATE pgbus_workflow_steps SET blocked_since = NULL WHERE id = p_step AND blocked_since IS NOT NULL;
        RETURN NULL;
    END IF;
    -- in line: give back what it holds (the triggers grant it on), and its run waits
    UPDATE pgbus_workflow_steps SET blocked_on = p_names[busy], blocked_key = p_keys[busy],
           blocked_since = COALESCE(blocked_since, now()), blocked_priority = p_priority, holds_slot = false
     WHERE id = p_step;
    UPDATE pgbus_workflows SET status = 'waiting', updated_at = now(), holds_slot = false
     WHERE workflow_id = p_run AND status = 'ready';
    PERFORM pgbus_workflow_attention(p_run);  -- in line: waiting since now (the event's refresh agrees)
    -- a slot left free (a capacity raised): the first in line takes it, this attempt maybe
    PERFORM pgbus_grant_slots(p_names[busy], p_keys[busy]);
    RETURN ARRAY[p_names[busy], p_keys[busy]];
END
$$;

-- A run started when its class limit's key has no free slot, or has runs in line already, goes in line
-- at once (its first step due now): no job is sent for it, and a given-back slot sends it as it would
-- any waiter. Under the key's lock, as every take and give-back. Returns whether it is in line (a
-- free slot the runs ahead of it could not take goes to the first waiting run, which may be this one).
CREATE FUNCTION pgbus_line_up(p_run uuid, p_name text, p_key text, p_cap integer, p_priority integer)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    first record;
BEGIN
    SELECT s.id, s.step_name, s.attempt INTO first FROM pgbus_workflow_steps s
     WHERE s.workflow_id = p_run AND s.status = 'scheduled' AND s.scheduled_at <= now() AND NOT s.wait_until_pending;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock(pgbus_limit_lock(p_name, p_key));
    IF (SELECT count(*) FROM pgbus_limit_slots WHERE limit_name = p_name AND limit_key = p_key AND slot <= p_cap
          AND (holder_run IS NOT NULL OR holder_step IS NOT NULL)) < p_cap
       AND NOT EXISTS (SELECT 1 FROM pgbus_workflow_steps WHERE blocked_on = p_name AND blocked_key = p_key
                         AND status = 'scheduled') THEN
        RETURN false;
    END IF;
    UPDATE pgbus_workflow_steps SET blocked_on = p_name, blocked_key = p_key, blocked_since = now(),
           blocked_priority = p_priority WHERE id = first.id;
    UPDATE pgbus_workflows SET status = 'waiting', updated_at = now() WHERE workflow_id = p_run;
    INSERT INTO pgbus_workflow_events (workflow_id, event, actor, step_id, step_name, attempt, details)
    VALUES (p_run, 'slot_waiting', 'system', first.id, first.step_name, first.attempt,
            jsonb_build_object('limit', p_name, 'key', p_key));
    PERFORM pgbus_workflow_attention(p_run);
    -- in line behind runs that cannot take a slot now (paused) while one is free: the first waiting
    -- run takes it, this one maybe (it is then ready, its job sent as any woken step's)
    PERFORM pgbus_grant_slots(p_name, p_key);
    RETURN EXISTS (SELECT 1 FROM pgbus_workflow_steps WHERE id = first.id AND blocked_on IS NOT NULL);
END
$$;

-- A rate's start at its claim: at most capacity starts in any window of per_seconds, counted from
-- the starts themselves (clock_timestamp() under the rate row's lock: the step's started_at). A
-- claim the rate's wake-up woke (p_woken) uses what that wake-up promised; any other claim queues
-- behind the waiters. Returns (started, the moment the attempt's run waits until: its wake-up's).
CREATE FUNCTION pgbus_take_rate(p_step bigint, p_run uuid, p_name text, p_cap integer, p_per double precision,
                                p_priority integer, p_woken boolean, OUT started timestamptz, OUT wake_at timestamptz,
                                OUT wake_new boolean) LANGUAGE plpgsql AS $$
DECLARE
    r record;
    t timestamptz;
    live timestamptz[];
    v_promised integer;
    waiters integer;
    need integer;
    idx integer;
BEGIN
    INSERT INTO pgbus_limits (name, kind, capacity, per_seconds) VALUES (p_name, 'rate', p_cap, p_per)
    ON CONFLICT (kind, name) DO NOTHING;
    SELECT * INTO r FROM pgbus_limits WHERE kind = 'rate' AND name = p_name FOR UPDATE;
    IF r.capacity <> p_cap OR r.per_seconds IS DISTINCT FROM p_per THEN
        UPDATE pgbus_limits SET capacity = p_cap, per_seconds = p_per, updated_at = now()
         WHERE kind = 'rate' AND name = p_name;
    END IF;
    t := clock_timestamp();
    live := ARRAY(SELECT x FROM unnest(r.starts) x WHERE x > t - make_interval(secs => p_per) ORDER BY x);
    v_promised := CASE WHEN r.promised_until > t THEN r.promised ELSE 0 END;
    IF p_woken AND v_promised > 0 THEN
        v_promised := v_promised - 1;
    ELSIF NOT p_woken AND EXISTS (SELECT 1 FROM pgbus_workflow_steps WHERE blocked_on = p_name
                                      AND blocked_key IS NULL AND status = 'scheduled' AND id <> p_step) THEN
        v_promised := cardinality(live) + p_cap;  -- behind the waiters
    END IF;
    IF cardinality(live) + v_promised < p_cap THEN
        UPDATE pgbus_limits SET starts = live || t, promised = v_promised
         WHERE kind = 'rate' AND name = p_name;
        UPDATE pgbus_workflow_steps SET blocked_since = NULL WHERE id = p_step AND blocked_since IS NOT NULL;
        started := t;
        RETURN;
    END IF;
    UPDATE pgbus_workflow_steps SET blocked_on = p_name, blocked_key = NULL,
           blocked_since = COALESCE(blocked_since, now()), blocked_priority = p_priority, holds_slot = false
     WHERE id = p_step;
    UPDATE pgbus_workflows SET status = 'waiting', updated_at = now(), holds_slot = false
     WHERE workflow_id = p_run AND status = 'ready';
    PERFORM pgbus_workflow_attention(p_run);
    -- wake when as many starts have left the window as there are waiters (at most capacity)
    SELECT count(*) INTO waiters FROM pgbus_workflow_steps WHERE blocked_on = p_name AND blocked_key IS NULL
       AND status = 'scheduled';
    need := LEAST(GREATEST(waiters, 1), p_cap);
    idx := cardinality(live) + (CASE WHEN r.promised_until > t THEN r.promised ELSE 0 END) - p_cap + need;
    wake_at := CASE WHEN idx < 1 OR cardinality(live) = 0 THEN t
                    ELSE live[LEAST(idx, cardinality(live))] + make_interval(secs => p_per) END;
    wake_new := r.wake_at IS NULL OR r.wake_at < t - interval '30 seconds' OR r.wake_at > wake_at;
    IF wake_new THEN
        UPDATE pgbus_limits SET wake_at = pgbus_take_rate.wake_at WHERE kind = 'rate' AND name = p_name;
    ELSE
        wake_at := r.wake_at;
    END IF;
END
$$;

-- A rate's wake-up: wake as many waiters as the window has room for now, first in line first, and
-- promise them their starts for 30 seconds. Returns the woken steps and, when waiters remain, the
-- moment of the next wake-up.
CREATE FUNCTION pgbus_wake_rate(p_name text, OUT woken bigint[], OUT next_at timestamptz) LANGUAGE plpgsql AS $$
DECLARE
    r record;
    t timestamptz;
    live timestamptz[];
    v_promised integer;
    room integer;
    left_behind integer;
BEGIN
    SELECT * INTO r FROM pgbus_limits WHERE kind = 'rate' AND name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        woken := '{}';
        RETURN;
    END IF;
    t := clock_timestamp();
    live := ARRAY(SELECT x FROM unnest(r.starts) x WHERE x > t - make_interval(secs => r.per_seconds) ORDER BY x);
    v_promised := CASE WHEN r.promised_until > t THEN r.promised ELSE 0 END;
    room := GREATEST(r.capacity - cardinality(live) - v_promised, 0);
    WITH line AS (
        SELECT s.id FROM pgbus_workflow_steps s JOIN pgbus_workflows w ON w.workflow_id = s.workflow_id
         WHERE s.blocked_on = p_name AND s.blocked_key IS NULL AND s.status = 'scheduled' AND w.status = 'waiting'
         ORDER BY s.blocked_priority DESC, s.id LIMIT room FOR UPDATE OF s, w SKIP LOCKED
    ), moved AS (
        UPDATE pgbus_workflow_steps s SET blocked_on = NULL, sends = s.sends + 1,
               job_id = 'pgbus-step-' || s.id || '-send' || (s.sends + 1), enqueued_at = now(),
               scheduled_at = now()
          FROM line WHERE s.id = line.id RETURNING s.id, s.workflow_id, s.step_name, s.attempt
    ), runs AS (
        UPDATE pgbus_workflows w SET status = 'ready', updated_at = now() FROM moved
         WHERE w.workflow_id = moved.workflow_id AND w.status = 'waiting' RETURNING w.workflow_id
    ), audit AS (
        INSERT INTO pgbus_workflow_events (workflow_id, event, actor, step_id, step_name, attempt, details)
        SELECT workflow_id, 'slot_granted', 'system', id, step_name, attempt, jsonb_build_object('rate', p_name)
          FROM moved
    )
    SELECT COALESCE(array_agg(id ORDER BY id), '{}') INTO woken FROM moved;
    PERFORM pgbus_workflow_attention(s.workflow_id) FROM pgbus_workflow_steps s WHERE s.id = ANY(woken);
    SELECT count(*) INTO left_behind FROM pgbus_workflow_steps WHERE blocked_on = p_name AND blocked_key IS NULL
       AND status = 'scheduled';
    IF left_behind > 0 THEN
        next_at := CASE WHEN cardinality(live) = 0 THEN t + make_interval(secs => r.per_seconds)
                        ELSE live[LEAST(GREATEST(cardinality(live) + v_promised + cardinality(woken) - r.capacity
                                                 + LEAST(left_behind, r.capacity), 1), cardinality(live))]
                             + make_interval(secs => r.per_seconds) END;
        IF next_at <= t THEN
            next_at := t + make_interval(secs => r.per_seconds);
        END IF;
    END IF;
    UPDATE pgbus_limits SET promised = v_promised + cardinality(woken), promised_until = t + interval '30 seconds',
           wake_at = next_at
     WHERE kind = 'rate' AND name = p_name;
END
$$;

-- A run waiting for a slot or a rate needs attention (waiting_overdue) once it has waited longer
-- than PGBUS_WAITING_THRESHOLD, since it was first put in line.
CREATE OR REPLACE FUNCTION pgbus_workflow_attention(run_id uuid) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    run_status text;
    run_paused_at timestamptz;
    stored_reason text;
    stored_since timestamptz;
    stored_step_id bigint;
    stored_error_class text;
    step_id bigint;
    step_status text;
    step_error_class text;
    step_scheduled_at timestamptz;
    step_waiting_since timestamptz;
    step_timeout_at timestamptz;
    step_outcome text;
    step_blocked_since timestamptz;
    new_reason text;
    new_since timestamptz;
BEGIN
    SELECT w.status, w.paused_at, w.attention_reason, w.attention_since, w.attention_step_id,
           w.attention_error_class
      INTO run_status, run_paused_at, stored_reason, stored_since, stored_step_id, stored_error_class
      FROM pgbus_workflows w WHERE w.workflow_id = run_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT s.id, s.status, s.error_class, s.scheduled_at, s.waiting_since, s.timeout_at, s.outcome, s.blocked_since
      INTO step_id, step_status, step_error_class, step_scheduled_at, step_waiting_since, step_timeout_at,
           step_outcome, step_blocked_since
      FROM pgbus_workflow_steps s WHERE s.workflow_id = run_id ORDER BY s.id DESC LIMIT 1;
    new_reason := CASE
        WHEN run_status = 'paused' AND step_status = 'failed' AND step_error_class = 'pgbus_flask.errors.StepStalled'
            THEN 'stalled'
        WHEN run_status = 'paused' AND step_status = 'failed'
             AND step_outcome IS DISTINCT FROM 'paused' AND step_outcome IS DISTINCT FROM 'reattempted'
            THEN 'paused_error'
        WHEN run_status = 'paused' THEN 'paused_manual'
        WHEN run_status = 'ready' AND step_status = 'scheduled' THEN 'overdue'
        WHEN run_status = 'waiting' AND step_status = 'waiting' AND step_timeout_at IS NULL THEN 'waiting_overdue'
        WHEN run_status = 'waiting' AND step_status = 'scheduled' AND step_blocked_since IS NOT NULL
            THEN 'waiting_overdue'
        END;
    IF new_reason IS NULL THEN
        step_id := NULL;
        step_error_class := NULL;
    ELSE
        new_since := CASE WHEN run_status = 'paused' THEN run_paused_at
                          WHEN run_status = 'ready' THEN step_scheduled_at
                          WHEN step_status = 'scheduled' THEN step_blocked_since
                          ELSE step_waiting_since END;
    END IF;
    IF (stored_reason, stored_since, stored_step_id, stored_error_class)
       IS NOT DISTINCT FROM (new_reason, new_since, step_id, step_error_class) THEN
        RETURN false;
    END IF;
    UPDATE pgbus_workflows SET attention_reason = new_reason, attention_since = new_since,
                               attention_step_id = step_id, attention_error_class = step_error_class
     WHERE workflow_id = run_id;
    RETURN true;
END
$$;
