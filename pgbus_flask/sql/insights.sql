-- Insights per workflow class (pgbus_flask/insights.py): the sweep folds the deltas the audit
-- trail's trigger adds into pgbus_insights (migration 0008); pages read the roll-ups and the deltas
-- not folded yet in one statement (one snapshot: a fold moves rows from one to the other atomically).
-- The kinds kept by 5 minutes (the throughput chart's series) are insights.FINE: 'started',
-- 'finished', 'cancelled', 'attempt'; every other kind is kept by the hour. A row older than two
-- days is merged into the hour (fine kinds) or the UTC day (the others).

-- name: insights_fold
-- Fold up to %(batch)s delta rows into the roll-ups (rows older than %(hourly)s into hourly or daily rows).
WITH moved AS (
    DELETE FROM pgbus_insight_deltas
    WHERE ctid = ANY(ARRAY(SELECT ctid FROM pgbus_insight_deltas LIMIT %(batch)s))
    RETURNING *
)
INSERT INTO pgbus_insights AS i (workflow_class, bucket, step, kind, label, bin, n, max_ms)
SELECT workflow_class, CASE WHEN bucket < now() - %(hourly)s::interval THEN CASE WHEN kind IN ('started', 'finished', 'cancelled', 'attempt') THEN date_trunc('hour', bucket) ELSE date_trunc('day', bucket, 'UTC') END ELSE bucket END,
       step, kind, label, bin, sum(n), max(max_ms)
FROM moved GROUP BY 1, 2, 3, 4, 5, 6
ON CONFLICT (workflow_class, bucket, step, kind, label, bin)
DO UPDATE SET n = i.n + EXCLUDED.n, max_ms = greatest(i.max_ms, EXCLUDED.max_ms);

-- name: insights_compact_until
-- Where this compaction stops: the database's now() less %s (an interval).
SELECT now() - %s::interval AS until;

-- name: insights_compact
-- Merge the rows older than %(hourly)s, from %(since)s (where the last compaction stopped), into hourly (fine kinds) or daily rows.
WITH old AS (
    DELETE FROM pgbus_insights
    WHERE bucket >= %(since)s AND bucket < now() - %(hourly)s::interval AND bucket <> CASE WHEN kind IN ('started', 'finished', 'cancelled', 'attempt') THEN date_trunc('hour', bucket) ELSE date_trunc('day', bucket, 'UTC') END
    RETURNING *
)
INSERT INTO pgbus_insights AS i (workflow_class, bucket, step, kind, label, bin, n, max_ms)
SELECT workflow_class, CASE WHEN kind IN ('started', 'finished', 'cancelled', 'attempt') THEN date_trunc('hour', bucket) ELSE date_trunc('day', bucket, 'UTC') END, step, kind, label, bin, sum(n), max(max_ms)
FROM old GROUP BY 1, 2, 3, 4, 5, 6
ON CONFLICT (workflow_class, bucket, step, kind, label, bin)
DO UPDATE SET n = i.n + EXCLUDED.n, max_ms = greatest(i.max_ms, EXCLUDED.max_ms);

-- name: insights_expire
-- Delete the roll-ups older than %s (an interval: insights.KEEP).
DELETE FROM pgbus_insights WHERE bucket < now() - %s::interval;

-- name: insights_read
-- A class's counts over a window in one snapshot, rolled up (pgbus_insights) and not folded yet (pgbus_insight_deltas, one row an event: summed by key first): per step, kind, label and bin (series false), and runs started and finished and attempts failed per bucket of %(width)s (series true, the throughput chart). The fine kinds count from the window's first bucket %(since)s, the others from the hour (or day) it starts in, %(coarse)s.
SELECT GROUPING(r.step) = 1 AS series, r.step, r.kind, r.label, r.bin, r.b, sum(r.n)::bigint AS n,
       max(r.max_ms) AS max_ms
FROM (SELECT step, kind, label, bin, n, max_ms,
             CASE WHEN (step = '' AND kind IN ('started', 'finished')) OR (kind = 'attempt' AND label = 'failed')
                  THEN date_bin(%(width)s::interval, bucket, %(origin)s) END AS b
      FROM (SELECT bucket, step, kind, label, bin, n, max_ms FROM pgbus_insights
            WHERE workflow_class = %(cls)s AND bucket >= %(coarse)s
            UNION ALL
            SELECT bucket, step, kind, label, bin, sum(n), max(max_ms) FROM pgbus_insight_deltas
            WHERE workflow_class = %(cls)s AND bucket >= %(coarse)s GROUP BY 1, 2, 3, 4, 5) AS u
      WHERE bucket >= %(since)s OR NOT kind IN ('started', 'finished', 'cancelled', 'attempt')) AS r
GROUP BY GROUPING SETS ((r.step, r.kind, r.label, r.bin), (r.kind, r.b))
HAVING GROUPING(r.step) = 0 OR r.b IS NOT NULL;

-- name: insights_now
-- A class's ongoing runs by current step and status, from the count rows (the pipeline).
SELECT step, status, sum(runs)::bigint AS runs FROM pgbus_run_counts
WHERE workflow_class = %(cls)s AND status IN ('ready', 'running', 'waiting', 'paused')
GROUP BY 1, 2 HAVING sum(runs) <> 0;
