-- Hot-path queries for PostgreSQL. Same names as sqlite.sql; each name is the
-- Python function that runs it (through runs.sql.execute). `%(now)s` is NULL in production, so the
-- database clock decides; tests pass a fixed instant.
-- History is partitioned by day (runs/partitions.py): every query of open runs names
-- history_day = '9999-12-31' as a constant, so the planner prunes to the open partitions and
-- a claim, heartbeat or completion never reads history. A run that succeeds moves to
-- its day's partition in the statement that finishes it, with its attempts.
-- statement_timestamp() rather than now(): a claim waits for its tenant lock,
-- and its lease must be measured from when the statement ran.

-- name: lock_ready_tenants
-- claims.lock_ready_tenants (claims.claim): lock the tenants that have a due run on the wanted queues, in
-- id order, so claims for one tenant take turns (its caps are then counted
-- race-free by the next statement's fresh snapshot) and claimers never
-- deadlock. NO KEY UPDATE does not block inserts of runs that reference them.
-- First, the claim transaction's limits: a lock wait is bounded, and a
-- claimer frozen inside it is cut off by the server instead of holding its
-- tenants for ever (SET LOCAL: they end with the transaction). And plans that
-- statistics cannot mislead: the open partition's swing from empty to a burst
-- of due runs within seconds, and a plan made while it looked empty would read
-- every due run of a (tenant, queue, priority) by bitmap and sort them, once
-- per claim (a drain of 20,000 runs then spent 15 ms a claim there instead of
-- 1), where the claim index, read in order, stops at the batch it needs.
SELECT set_config('lock_timeout', %(lock_timeout)s, true),
       set_config('idle_in_transaction_session_timeout', %(idle_timeout)s, true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('enable_seqscan', 'off', true);
-- Then the ready set is settled (runs.models.ReadyMark): the marks due now on
-- the wanted queues, one probe of run_claimable per (tenant, queue, priority)
-- of them for its next claimable run, whatever else is scheduled. A (tenant,
-- queue) with none due any more loses its due marks and gets one at that next
-- run instead, in this one statement: its snapshot is the one that saw no due
-- run, and a mark it does not see (a writer not committed yet) it does not
-- delete. SKIP LOCKED: a mark another claim is settling is left to it.
WITH due AS (
    SELECT m.tenant_id, m.queue
    FROM runs_readymark m
    WHERE m.queue = ANY(%(queues)s::text[])
      AND m.due_at <= coalesce(%(now)s::timestamptz, statement_timestamp())
      AND (%(tenant)s::bigint IS NULL OR m.tenant_id = %(tenant)s::bigint)
    GROUP BY m.tenant_id, m.queue
),
stale AS MATERIALIZED (
    SELECT d.tenant_id, d.queue, n.next
    FROM due d
    CROSS JOIN LATERAL (
        SELECT min(f.available_at) AS next
        FROM (VALUES (0), (1), (2)) AS p(priority)
        CROSS JOIN LATERAL (
            SELECT r.available_at FROM runs_run r
            WHERE r.tenant_id = d.tenant_id AND r.queue = d.queue AND r.priority = p.priority
              AND r.state IN ('scheduled', 'retry_wait') AND r.history_day = '9999-12-31'
            ORDER BY r.available_at
            LIMIT 1
        ) AS f
    ) AS n
    WHERE n.next IS NULL OR n.next > coalesce(%(now)s::timestamptz, statement_timestamp())
),
gone AS (
    DELETE FROM runs_readymark m
    WHERE m.id IN (SELECT g.id FROM runs_readymark g JOIN stale s ON s.tenant_id = g.tenant_id AND s.queue = g.queue
                   WHERE g.due_at <= coalesce(%(now)s::timestamptz, statement_timestamp())
                   FOR UPDATE OF g SKIP LOCKED)
    RETURNING m.tenant_id, m.queue
)
INSERT INTO runs_readymark (tenant_id, queue, due_at)
SELECT s.tenant_id, s.queue, s.next
FROM stale s
WHERE s.next IS NOT NULL AND (s.tenant_id, s.queue) IN (SELECT tenant_id, queue FROM gone);
-- Last, the tenants of the marks still due (each has a due run), locked.
-- SKIP LOCKED: a tenant whose row another claim holds is served by that
-- claim; waiting for it would stall this claimer behind one that may be frozen.
-- A paused tenant (paused_at) is passed over, and so is a queue it paused on
-- its own (a jobs_queuepause row, probed by its unique index): runs.controls
-- pauses by locking the tenant row, so a pause waits for the claims that
-- hold the row, and a claim that waited for a pause re-checks the filter on
-- the row as it is then: once a pause commits, no claim leases those runs.
SELECT t.id
FROM jobs_tenant t
WHERE t.id IN (SELECT m.tenant_id FROM runs_readymark m
               WHERE m.queue = ANY(%(queues)s::text[])
                 AND m.due_at <= coalesce(%(now)s::timestamptz, statement_timestamp())
                 AND (%(tenant)s::bigint IS NULL OR m.tenant_id = %(tenant)s::bigint)
                 AND NOT EXISTS (SELECT 1 FROM jobs_queuepause qp WHERE qp.tenant_id = m.tenant_id AND qp.queue = m.queue))
  -- A dedicated worker (run_worker --tenants / --exclude-tenants) serves only its tenants.
  AND (%(only_tenants)s::bigint[] IS NULL OR t.id = ANY(%(only_tenants)s::bigint[]))
  AND t.id <> ALL(%(except_tenants)s::bigint[])
  AND t.paused_at IS NULL
ORDER BY t.id
FOR NO KEY UPDATE OF t SKIP LOCKED;

-- name: wait_for_ready_tenants
-- claims.wait_for_ready_tenants (claims.claim, when lock_ready_tenants locked
-- nothing): the same tenants (lock_ready_tenants settled their marks), waiting
-- for the rows other claims hold (up to the claim's lock_timeout) instead of
-- passing them over, so that a second worker on a busy tenant takes the next
-- batch as soon as the first commits rather than sleeping a poll. Its caller
-- runs it in a savepoint and treats a lock timeout as "nothing to claim".
SELECT t.id
FROM jobs_tenant t
WHERE t.id IN (SELECT m.tenant_id FROM runs_readymark m
               WHERE m.queue = ANY(%(queues)s::text[])
                 AND m.due_at <= coalesce(%(now)s::timestamptz, statement_timestamp())
                 AND (%(tenant)s::bigint IS NULL OR m.tenant_id = %(tenant)s::bigint)
                 AND NOT EXISTS (SELECT 1 FROM jobs_queuepause qp WHERE qp.tenant_id = m.tenant_id AND qp.queue = m.queue))
  -- A dedicated worker (run_worker --tenants / --exclude-tenants) serves only its tenants.
  AND (%(only_tenants)s::bigint[] IS NULL OR t.id = ANY(%(only_tenants)s::bigint[]))
  AND t.id <> ALL(%(except_tenants)s::bigint[])
  AND t.paused_at IS NULL
ORDER BY t.id
FOR NO KEY UPDATE OF t;

-- name: claim_candidates
-- claims.claim_candidates (claims.claim): lock up to %(per_tenant)s due runs per (tenant, queue, priority), oldest
-- first, of active jobs only (one index probe each on run_claimable: the
-- round-robin needs every tenant's head, not just the globally oldest rows;
-- runs of paused or cancelled jobs stay where they are).
-- SKIP LOCKED passes over runs that a cancel or the reaper holds. Returns each
-- candidate with its tenant's free room and, only for jobs with a limit or an
-- overlap policy, the count of the job's leased runs; then the run's queue and the job's concurrency
-- group, for the queue and group limits (runs.limits), and whether a queue
-- limit may apply to its tenant (so a claim with none reads none). `kinds` (NULL: all)
-- leaves the runs of other target kinds to their own consumers. A queue the
-- tenant paused (a jobs_queuepause row) is left out before its probes run;
-- lock_ready_tenants already left out tenants paused as a whole.
WITH rooms AS MATERIALIZED (
    SELECT t.id AS tenant_id,
           t.max_concurrent_runs
             - (SELECT count(*) FROM runs_run l
                WHERE l.tenant_id = t.id AND l.state = 'leased' AND l.history_day = '9999-12-31') AS room,
           -- Whether a queue limit may apply (runs.limits.gates reads them only then).
           EXISTS (SELECT 1 FROM jobs_queuelimit ql
                   WHERE ql.queue = ANY(%(queues)s::text[]) AND (ql.tenant_id IS NULL OR ql.tenant_id = t.id))
             AS queue_limited
    FROM jobs_tenant t
    WHERE t.id = ANY(%(tenants)s::bigint[])
),
candidates AS (
    SELECT c.*
    FROM unnest(%(tenants)s::bigint[]) AS t(id)
    CROSS JOIN unnest(%(queues)s::text[]) AS q(name)
    CROSS JOIN (VALUES (0), (1), (2)) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT r.id, r.tenant_id, r.job_id, r.priority, r.origin, r.available_at, r.queue
        FROM runs_run r
        WHERE r.tenant_id = t.id AND r.queue = q.name AND r.priority = p.priority
          AND r.state IN ('scheduled', 'retry_wait') AND r.history_day = '9999-12-31'
          AND r.available_at <= coalesce(%(now)s::timestamptz, statement_timestamp())
          -- The tenant's failure breaker (runs.breaker) holds its retries while open.
          AND (r.state = 'scheduled'
               OR NOT EXISTS (SELECT 1 FROM jobs_tenant bt WHERE bt.id = t.id AND bt.breaker_opened_at IS NOT NULL))
          -- A filter, not a join: a join lets the planner start from the jobs
          -- and sort every due run; this keeps the index order and the LIMIT.
          AND r.job_id NOT IN (SELECT jd.id FROM jobs_jobdefinition jd
                               WHERE jd.tenant_id = t.id
                                 AND (jd.status <> 'active' OR jd.target_kind <> ALL(%(kinds)s::text[])))
        ORDER BY r.available_at
        -- No more than the tenant's room could take, and one more (held back: what tells
        -- that its cap holds it, runs.metrics): a tenant at its cap has no runs locked for nothing.
        LIMIT least(%(per_tenant)s, (SELECT greatest(rm.room, 0) + 1 FROM rooms rm WHERE rm.tenant_id = t.id))
        FOR UPDATE OF r SKIP LOCKED
    ) c
    WHERE NOT EXISTS (SELECT 1 FROM jobs_queuepause qp WHERE qp.tenant_id = t.id AND qp.queue = q.name)
),
gates AS MATERIALIZED (
    SELECT j.id AS job_id, j.concurrency, j.overlap_policy, j.concurrency_group, j.concurrency_group_limit,
           CASE WHEN j.concurrency IS NOT NULL OR j.overlap_policy <> 'allow'
                THEN (SELECT count(*) FROM runs_run l
                      WHERE l.tenant_id = j.tenant_id AND l.job_id = j.id AND l.state = 'leased'
                        AND l.history_day = '9999-12-31')
                ELSE 0 END AS job_leased
    FROM jobs_jobdefinition j
    WHERE j.id IN (SELECT DISTINCT job_id FROM candidates)
)
SELECT c.id, c.tenant_id, c.job_id, c.priority, c.origin, c.available_at,
       g.concurrency, g.overlap_policy, g.job_leased, rm.room,
       c.queue, g.concurrency_group, g.concurrency_group_limit, rm.queue_limited
FROM candidates c
JOIN gates g ON g.job_id = c.job_id
JOIN rooms rm ON rm.tenant_id = c.tenant_id;

-- name: lease_runs
-- transitions.lease_runs (claims.claim): lease the chosen runs, which claim_candidates locked in this
-- transaction (so no state re-check: it would also tempt the planner into
-- scanning run_claimable instead of one primary-key lookup per id). Each gets
-- a new fencing token from the one global sequence; the lease is capped by
-- the job's timeout. Returns what a worker needs to execute and complete it,
-- the tenant's allowed task modules included (read with the lease: no query of its own).
UPDATE runs_run r
SET state = 'leased',
    attempt = r.attempt + 1,
    fencing_token = nextval('runs_fencing_token_seq'),
    worker_id = %(worker)s,
    started_at = coalesce(%(now)s::timestamptz, statement_timestamp()),
    lease_expires_at = coalesce(%(now)s::timestamptz, statement_timestamp())
        + make_interval(secs => least(%(lease)s, r.timeout_seconds))
FROM unnest(%(ids)s::bigint[]) AS chosen(id), jobs_jobdefinition j
WHERE r.id = chosen.id AND r.history_day = '9999-12-31' AND j.id = r.job_id
RETURNING r.id, r.tenant_id, r.job_id, j.name, j.target_kind, j.target_ref, r.queue, r.attempt,
          r.max_attempts, r.idempotency_key, r.fencing_token, r.payload, r.due_at, r.available_at,
          r.started_at, r.lease_expires_at, r.timeout_seconds, r.args,
          (SELECT t.task_module_prefixes FROM jobs_tenant t WHERE t.id = r.tenant_id);

-- name: heartbeat
-- transitions.heartbeat: extend the lease only while the caller's fencing
-- token is the run's current one and the run is leased; never past the
-- attempt's start + the job's timeout. No row back: the caller is stale.
UPDATE runs_run
SET lease_expires_at = least(
        coalesce(%(now)s::timestamptz, statement_timestamp()) + make_interval(secs => %(lease)s),
        started_at + make_interval(secs => timeout_seconds))
WHERE id = %(id)s AND history_day = '9999-12-31' AND fencing_token = %(token)s
  -- A token of an older restore generation (runs/generations.py) is stale whatever the row says.
  AND fencing_token >= (SELECT coalesce(max(number), 0) << 40 FROM runs_generation)
  -- `state || ''`: not the partial index's predicate, so this stays a
  -- primary-key lookup even when run_leased_by_owner's statistics say empty.
  AND state || '' = 'leased'
RETURNING lease_expires_at;

-- name: complete_runs
-- transitions.complete_runs (complete, complete_many): finish many attempts in one statement. Each run
-- moves only where its fencing token matches and it is still leased (the
-- `held` CTE locks those rows by primary key, and re-checks them after any
-- wait); the attempt rows (with the task's return value, JSON text or
-- NULL) and any dead letters are written in the same
-- statement. The input drives the join, so each run is one primary-key
-- lookup (never a scan of the leased range). Backoff before retry n is full jitter:
-- uniform(0, min(retry_max, retry_base * 2^(n-1))).
-- Each moved run comes back with its job, tenant, attempt, token, key and holder: the
-- metrics and the move log (runs/move_log.py) read those rows, never the runs again.
-- A run that succeeds goes into history: its row moves to the partition of `day` (the newest
-- listed day on or before today, runs/partitions.py), and so do its attempts, the one
-- written here and any earlier ones (`earlier`). A run that dies stays open with its
-- dead letter until someone replays or discards it.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(outcomes)s::text[],
                         %(errors)s::text[], %(retryable)s::boolean[], %(results)s::text[])
           AS i(id, token, outcome, error, retryable, result)
    -- A token of an older restore generation (runs/generations.py) is stale whatever the row says.
    WHERE i.token >= (SELECT coalesce(max(number), 0) << 40 FROM runs_generation)
),
day AS (
    SELECT coalesce(
        (SELECT max(day) FROM runs_history_day
         WHERE day <= (coalesce(%(now)s::timestamptz, statement_timestamp()) AT TIME ZONE 'UTC')::date),
        (SELECT min(day) FROM runs_history_day)) AS history_day
),
locked AS MATERIALIZED (
    SELECT r.id, r.attempt, r.max_attempts, r.fencing_token, r.worker_id, r.available_at, r.started_at,
           r.job_id, r.tenant_id, i.outcome, i.error, i.retryable, i.result
    FROM input i
    CROSS JOIN LATERAL (
        -- `state || ''` is not run_leased_by_owner's predicate, so the
        -- planner cannot use that index (its statistics often say "empty",
        -- from an ANALYZE taken while nothing was leased) to scan every
        -- leased run per completion: this stays one primary-key lookup.
        SELECT * FROM runs_run r
        WHERE r.id = i.id AND r.history_day = '9999-12-31' AND r.fencing_token = i.token AND r.state || '' = 'leased'
        FOR NO KEY UPDATE
    ) r
),
-- The jobs are joined to the locked runs once, as a whole (a join inside the
-- lateral's loop built a hash of the jobs table per completed run).
held AS (
    SELECT l.id, l.attempt, l.max_attempts, l.fencing_token, l.worker_id, l.available_at, l.started_at,
           l.job_id, l.tenant_id, l.outcome, l.error, l.result, j.name AS job_name,
           CASE WHEN l.outcome = 'succeeded' THEN 'succeeded'
                WHEN l.retryable AND l.attempt < l.max_attempts THEN 'retry_wait'
                ELSE 'dead' END AS next_state,
           random() * least(j.retry_max_seconds, j.retry_base_seconds * power(2, l.attempt - 1)) AS backoff
    FROM locked l
    JOIN jobs_jobdefinition j ON j.id = l.job_id
),
moved AS (
    UPDATE runs_run r
    SET state = h.next_state,
        lease_expires_at = NULL,
        available_at = CASE WHEN h.next_state = 'retry_wait'
                            THEN coalesce(%(now)s::timestamptz, statement_timestamp()) + make_interval(secs => h.backoff)
                            ELSE r.available_at END,
        finished_at = CASE WHEN h.next_state = 'retry_wait' THEN NULL
                           ELSE coalesce(%(now)s::timestamptz, statement_timestamp()) END,
        last_error = h.error,
        history_day = CASE WHEN h.next_state = 'succeeded' THEN d.history_day ELSE r.history_day END
    FROM held h, day d
    WHERE r.id = h.id AND r.history_day = '9999-12-31'
    RETURNING r.id, r.state, r.available_at, r.job_id, r.tenant_id, r.attempt, r.fencing_token, r.idempotency_key,
              r.worker_id, r.queue, r.priority, h.job_name
),
attempts AS (
    INSERT INTO runs_attempt (run_id, attempt, fencing_token, worker_id, available_at, started_at, ended_at, outcome, error,
                              return_value, history_day)
    SELECT h.id, h.attempt, h.fencing_token, h.worker_id, h.available_at, h.started_at,
           coalesce(%(now)s::timestamptz, statement_timestamp()), h.outcome, h.error, h.result::jsonb,
           CASE WHEN h.next_state = 'succeeded' THEN d.history_day ELSE DATE '9999-12-31' END
    FROM held h, day d
),
earlier AS (
    UPDATE runs_attempt a
    SET history_day = d.history_day
    FROM held h, day d
    WHERE h.next_state = 'succeeded' AND h.attempt > 1 AND a.run_id = h.id AND a.history_day = '9999-12-31'
),
dead AS (
    INSERT INTO dlq_deadletter (run_id, job_id, tenant_id, last_error, dead_at, resolved_by, history_day)
    SELECT h.id, h.job_id, h.tenant_id, h.error, coalesce(%(now)s::timestamptz, statement_timestamp()), '',
           DATE '9999-12-31'
    FROM held h
    WHERE h.next_state = 'dead'
),
-- A run waiting to retry is claimable: a ready mark per (tenant, queue) at its earliest retry (runs.models.ReadyMark).
marked AS (
    INSERT INTO runs_readymark (tenant_id, queue, due_at)
    SELECT tenant_id, queue, min(available_at) FROM moved WHERE state = 'retry_wait' GROUP BY tenant_id, queue
)
SELECT id, state, available_at, job_id, tenant_id, attempt, fencing_token, idempotency_key, worker_id, queue, priority,
       job_name
FROM moved;

-- name: expire_leases
-- transitions.expire_leases (reap, the scheduler's step): leases past their expiry, at most %(n)s per pass, oldest
-- first. SKIP LOCKED leaves a run that a completion is finishing right now to
-- that completion. A run whose lease reached its start + timeout timed out;
-- otherwise its worker vanished (lease_expired). Either way: retry_wait with
-- backoff while attempts are left, else dead with a dead letter.
-- Each moved run comes back with its job, tenant, attempt, token, key and holder: the
-- metrics and the move log (runs/move_log.py) read those rows, never the runs again.
WITH held AS (
    SELECT r.id, r.attempt, r.max_attempts, r.fencing_token, r.worker_id, r.available_at, r.started_at,
           r.job_id, r.tenant_id, j.name AS job_name,
           CASE WHEN r.lease_expires_at >= r.started_at + make_interval(secs => r.timeout_seconds)
                THEN 'timed_out' ELSE 'lease_expired' END AS outcome,
           CASE WHEN r.attempt < r.max_attempts THEN 'retry_wait' ELSE 'dead' END AS next_state,
           random() * least(j.retry_max_seconds, j.retry_base_seconds * power(2, r.attempt - 1)) AS backoff
    FROM runs_run r
    JOIN jobs_jobdefinition j ON j.id = r.job_id
    WHERE r.state = 'leased' AND r.history_day = '9999-12-31'
      AND r.lease_expires_at < coalesce(%(now)s::timestamptz, statement_timestamp())
    ORDER BY r.lease_expires_at
    LIMIT %(n)s
    FOR NO KEY UPDATE OF r SKIP LOCKED
),
moved AS (
    UPDATE runs_run r
    SET state = h.next_state,
        lease_expires_at = NULL,
        available_at = CASE WHEN h.next_state = 'retry_wait'
                            THEN coalesce(%(now)s::timestamptz, statement_timestamp()) + make_interval(secs => h.backoff)
                            ELSE r.available_at END,
        finished_at = CASE WHEN h.next_state = 'dead' THEN coalesce(%(now)s::timestamptz, statement_timestamp()) END,
        last_error = CASE WHEN h.outcome = 'timed_out' THEN 'timed out: ran longer than the job''s timeout_seconds'
                          ELSE 'lease expired: worker ' || h.worker_id || ' stopped heartbeating' END
    FROM held h
    WHERE r.id = h.id AND r.history_day = '9999-12-31'
    RETURNING r.id, r.state, r.available_at, r.job_id, r.tenant_id, r.attempt, r.fencing_token, r.idempotency_key,
              r.worker_id, r.queue, r.priority, h.job_name, h.outcome
),
attempts AS (
    INSERT INTO runs_attempt (run_id, attempt, fencing_token, worker_id, available_at, started_at, ended_at, outcome, error,
                              history_day)
    SELECT h.id, h.attempt, h.fencing_token, h.worker_id, h.available_at, h.started_at,
           coalesce(%(now)s::timestamptz, statement_timestamp()), h.outcome,
           CASE WHEN h.outcome = 'timed_out' THEN 'timed out' ELSE 'lease expired' END, DATE '9999-12-31'
    FROM held h
),
dead AS (
    INSERT INTO dlq_deadletter (run_id, job_id, tenant_id, last_error, dead_at, resolved_by, history_day)
    SELECT h.id, h.job_id, h.tenant_id,
           CASE WHEN h.outcome = 'timed_out' THEN 'timed out' ELSE 'lease expired' END,
           coalesce(%(now)s::timestamptz, statement_timestamp()), '', DATE '9999-12-31'
    FROM held h
    WHERE h.next_state = 'dead'
),
-- A run waiting to retry is claimable: a ready mark per (tenant, queue) at its earliest retry (runs.models.ReadyMark).
marked AS (
    INSERT INTO runs_readymark (tenant_id, queue, due_at)
    SELECT tenant_id, queue, min(available_at) FROM moved WHERE state = 'retry_wait' GROUP BY tenant_id, queue
)
SELECT id, state, available_at, job_id, tenant_id, attempt, fencing_token, idempotency_key, worker_id, queue, priority,
       job_name, outcome
FROM moved;

-- name: next_fencing_tokens
-- shards.next_fencing_tokens: %(n)s fresh values of the global fencing
-- sequence, for the epochs of shard leases (runs get theirs in lease_runs).
SELECT nextval('runs_fencing_token_seq') FROM generate_series(1, %(n)s);

-- name: insert_fresh_run
-- enqueue.insert_fresh_run: one scheduled run whose key no run holds (a fresh
-- uuid): a single-row VALUES insert into the open partition's table, without
-- insert_runs' probes of history for an earlier run of that key. With its ready mark (runs.models.ReadyMark).
-- The only insert that sets `args` (a Django task's positional arguments).
WITH inserted AS (
INSERT INTO runs_run (job_id, tenant_id, origin, due_at, available_at, state, attempt, max_attempts, timeout_seconds,
                      idempotency_key, worker_id, queue, priority, shard, payload, args, last_error, reason,
                      created_at, history_day)
VALUES (%(job_id)s, %(tenant_id)s, %(origin)s, %(due_at)s::timestamp AT TIME ZONE 'UTC',
        %(available_at)s::timestamp AT TIME ZONE 'UTC', %(state)s, 0, %(max_attempts)s, %(timeout_seconds)s,
        %(idempotency_key)s, '', %(queue)s, %(priority)s, %(shard)s, %(payload)s::jsonb, %(args)s::jsonb, '',
        %(reason)s, %(created_at)s, DATE '9999-12-31')
ON CONFLICT DO NOTHING
RETURNING id, job_id, idempotency_key, tenant_id, queue, available_at, state
),
marked AS (
    INSERT INTO runs_readymark (tenant_id, queue, due_at)
    SELECT tenant_id, queue, available_at FROM inserted WHERE state IN ('scheduled', 'retry_wait')
)
SELECT id, job_id, idempotency_key FROM inserted;

-- name: insert_runs
-- enqueue.insert_runs: insert new runs, one JSON object per run, in one
-- statement whatever their number (one plan, not one VALUES row each).
-- Datetimes arrive as UTC wall times. A new run has no attempt, lease or
-- error yet, so those columns are constants here. A row that would repeat
-- the job's occurrence or a caller's key is passed over; RETURNING names the
-- rows that went in. Two guards, because a unique index of a partitioned table
-- must hold the partition key: the open partition's unique indexes (ON
-- CONFLICT: two inserts at once, or a run still open), and the NOT EXISTS
-- probes of the day partitions (the first run of that key already in history;
-- one index probe per day partition), and of the open one only for a row that goes to history
-- (a skipped summary: ON CONFLICT covers the rest there). OFFSET 0 keeps the probes probes,
-- and leaving the open partition out of them but for those rows keeps its size out of their
-- plan: the planner would otherwise hash every scheduled (or API) run, or scan the open
-- partition once per row, when the plan was made while that partition was nearly empty (a
-- prepared statement keeps it), and a burst of materialisation then read the whole open
-- partition for each insert.
-- A run that finished while this statement ran is not in its snapshot:
-- runs.enqueue.enqueue checks again after the insert for the callers' keys;
-- occurrences are inserted under their job's lock.
-- A run inserted finished (a skipped summary) goes straight into history.
-- The claimable rows that went in get a ready mark per (tenant, queue), at their earliest
-- available_at (runs.models.ReadyMark), in the same statement.
WITH inserted AS (
INSERT INTO runs_run (job_id, tenant_id, origin, due_at, available_at, state, attempt, max_attempts, timeout_seconds,
                      idempotency_key, worker_id, queue, priority, shard, payload, finished_at, last_error, reason,
                      covers_until, created_at, history_day)
SELECT r.job_id, r.tenant_id, r.origin, r.due_at AT TIME ZONE 'UTC', r.available_at AT TIME ZONE 'UTC', r.state, 0,
       r.max_attempts, r.timeout_seconds, r.idempotency_key, '', r.queue, r.priority, r.shard, r.payload,
       r.finished_at AT TIME ZONE 'UTC', '', r.reason, r.covers_until AT TIME ZONE 'UTC', %(created_at)s,
       CASE WHEN r.state IN ('succeeded', 'cancelled', 'skipped')
            THEN coalesce((SELECT max(h.day) FROM runs_history_day h WHERE h.day <= r.finished_at::date),
                          (SELECT min(h.day) FROM runs_history_day h))
            ELSE DATE '9999-12-31' END
FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(job_id bigint, tenant_id bigint, origin text, due_at timestamp,
                                              available_at timestamp, state text, max_attempts integer,
                                              timeout_seconds integer, idempotency_key text, queue text,
                                              priority smallint, shard smallint, payload jsonb,
                                              finished_at timestamp, reason text, covers_until timestamp)
WHERE NOT (r.origin = 'schedule' AND EXISTS (
          SELECT 1 FROM runs_run o
          WHERE o.origin = 'schedule' AND o.job_id = r.job_id AND o.due_at = r.due_at AT TIME ZONE 'UTC'
            AND o.history_day < DATE '9999-12-31'
          OFFSET 0))
  AND NOT (r.origin = 'api' AND EXISTS (
          SELECT 1 FROM runs_run o
          WHERE o.origin = 'api' AND o.tenant_id = r.tenant_id AND o.idempotency_key = r.idempotency_key
            AND o.history_day < DATE '9999-12-31'
          OFFSET 0))
  AND NOT (r.origin = 'schedule' AND r.state IN ('succeeded', 'cancelled', 'skipped') AND EXISTS (
          SELECT 1 FROM runs_run o
          WHERE o.origin = 'schedule' AND o.job_id = r.job_id AND o.due_at = r.due_at AT TIME ZONE 'UTC'
            AND o.history_day = DATE '9999-12-31'
          OFFSET 0))
  AND NOT (r.origin = 'api' AND r.state IN ('succeeded', 'cancelled', 'skipped') AND EXISTS (
          SELECT 1 FROM runs_run o
          WHERE o.origin = 'api' AND o.tenant_id = r.tenant_id AND o.idempotency_key = r.idempotency_key
            AND o.history_day = DATE '9999-12-31'
          OFFSET 0))
ON CONFLICT DO NOTHING
RETURNING id, job_id, idempotency_key, tenant_id, queue, available_at, state
),
marked AS (
    INSERT INTO runs_readymark (tenant_id, queue, due_at)
    SELECT tenant_id, queue, min(available_at) FROM inserted WHERE state IN ('scheduled', 'retry_wait')
    GROUP BY tenant_id, queue
)
SELECT id, job_id, idempotency_key FROM inserted;

-- name: start_attempt
-- transitions.start_attempt (the Celery task runs.celery_execute, before it calls the handler): the
-- executor takes over a lease that run_dispatcher claimed and published. Only
-- once per lease: while the run is still held by the dispatcher that published
-- it (`dispatched_by`) under this fencing token, so a message delivered again
-- (a worker lost, a broker restart) never starts a second execution of one
-- lease. Records who runs it and when it really started (its lateness), and
-- leases it from now, never past that start + the job's timeout. Its commit
-- does not wait for the WAL flush (synchronous_commit off, this transaction
-- only): a take-over lost in a database crash leaves the lease with the
-- dispatcher, where it expires and the reaper retries the run, as it would
-- after a worker crash. One flush per execution would cap a Celery worker
-- child at the disk's flush rate. The setting is made by the statement itself
-- (`relaxed`, evaluated once): one round trip, in its own implicit transaction.
UPDATE runs_run
SET worker_id = %(worker)s,
    started_at = coalesce(%(now)s::timestamptz, statement_timestamp()),
    lease_expires_at = coalesce(%(now)s::timestamptz, statement_timestamp())
        + make_interval(secs => least(%(lease)s, timeout_seconds))
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed
WHERE id = %(id)s AND history_day = '9999-12-31' AND fencing_token = %(token)s AND worker_id = %(dispatched_by)s
  AND fencing_token >= (SELECT coalesce(max(number), 0) << 40 FROM runs_generation)  -- not of an older restore generation
  -- `state || ''`: a primary-key lookup, as in heartbeat.
  AND state || '' = 'leased'
RETURNING lease_expires_at;

-- name: start_attempts
-- transitions.start_attempts (the Celery task duetime.execute_batch, before its first handler): the
-- executor takes over every lease of one batch message in one statement, on the terms of
-- start_attempt (once per lease, while `dispatched_by` holds it under that token; the same
-- relaxed commit). The batch also calls it with its own name as `dispatched_by` to stamp a run
-- again when its turn comes (its real start, and its lease from then) and to keep the runs that
-- wait their turn leased. Primary-key lookups driven by the input, in the open partition.
UPDATE runs_run r
SET worker_id = %(worker)s,
    started_at = coalesce(%(now)s::timestamptz, statement_timestamp()),
    lease_expires_at = coalesce(%(now)s::timestamptz, statement_timestamp())
        + make_interval(secs => least(%(lease)s, r.timeout_seconds))
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed,
     unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS i(id, token)
WHERE r.id = i.id AND r.history_day = '9999-12-31' AND r.fencing_token = i.token AND r.worker_id = %(dispatched_by)s
  AND r.fencing_token >= (SELECT coalesce(max(number), 0) << 40 FROM runs_generation)  -- not of an older restore generation
  AND r.state || '' = 'leased'
RETURNING r.id, r.lease_expires_at;

-- name: waiting
-- dispatcher.waiting (run_dispatcher's tick): how many runs this dispatcher published that no
-- Celery worker took over yet (still leased under its name). The open partition only (a constant),
-- read through run_leased_by_owner's predicate: a count of the leased runs, never of history.
SELECT count(*) FROM runs_run
WHERE state = 'leased' AND history_day = '9999-12-31' AND worker_id = %(dispatcher)s;

-- name: fold_attempts
-- rollups.tick: the attempts after the cursor, up to the first one that ended
-- less than %(settle)s ago (a completion still committing may hold a lower id),
-- among the next %(batch)s attempt ids, aggregated by tenant, job, start and end minute,
-- outcome and, for first attempts, lateness bin (rollups.lateness_bin: log
-- bins 25 %% wide in ms, bin 0 under 1 ms), so the scheduler folds a few
-- hundred groups instead of reading every attempt into Python. `last_id` is
-- the highest attempt id folded (the cursor's next value), on every row.
-- The span is a range of ids from the first one after the cursor (min(): one
-- index descent), not `id > cursor ORDER BY id LIMIT n`, whose plan depends
-- on statistics (stale ones chose a scan of the whole table and a sort).
WITH span AS MATERIALIZED (
    SELECT a.id, a.attempt, a.started_at, a.ended_at, a.outcome, a.available_at, a.run_id, a.history_day
    FROM runs_attempt a
    WHERE a.id >= (SELECT min(id) FROM runs_attempt WHERE id > %(after)s)
      AND a.id < (SELECT min(id) FROM runs_attempt WHERE id > %(after)s) + %(batch)s
),
cut AS (
    SELECT coalesce(min(id), 9223372036854775807) AS first_unsettled
    FROM span
    WHERE ended_at > %(now)s::timestamptz - make_interval(secs => %(settle)s)
),
settled AS MATERIALIZED (
    SELECT s.*, r.tenant_id, r.job_id,
           CASE WHEN s.attempt = 1
                THEN greatest(0, floor(extract(epoch FROM s.started_at - greatest(s.available_at, r.created_at)) * 1000))::bigint
           END AS ms
    -- An attempt lives in its run's partition (same history_day): one probe of it, not of every day.
    FROM span s JOIN runs_run r ON r.id = s.run_id AND r.history_day = s.history_day, cut
    WHERE s.id < cut.first_unsettled
)
SELECT tenant_id, job_id, date_trunc('minute', started_at) AS started_minute,
       date_trunc('minute', ended_at) AS ended_minute, outcome,
       CASE WHEN ms IS NULL THEN NULL WHEN ms < 1 THEN 0
            ELSE least(%(max_bin)s, 1 + floor(ln(ms::float8) / ln(%(growth)s::float8)))::int END AS bin,
       count(*) AS attempts, count(ms) AS first_attempts, coalesce(sum(ms), 0)::bigint AS ms_sum,
       coalesce(max(ms), 0)::bigint AS ms_max, (SELECT max(id) FROM settled) AS last_id
FROM settled
GROUP BY 1, 2, 3, 4, 5, 6;

-- name: due_shards
-- materialize.due_shards (materialize.materialize): which of %(shards)s have an active job due by
-- %(horizon)s that no pause holds, the shard of the most urgent one first. One descent of
-- job_due_by_shard per shard (LATERAL ... LIMIT 1), stopping at its first due job whose tenant and
-- queue are not paused: a pass reads nothing of a shard with nothing due, and does not read, let
-- alone sort, the hundreds of thousands of jobs of a burst to choose where to start. The pauses are
-- the filters of materialize._due, so a shard whose due jobs are all paused is not visited.
SELECT s.shard
FROM unnest(%(shards)s::smallint[]) AS s(shard)
CROSS JOIN LATERAL (
    SELECT j.next_due_at
    FROM jobs_jobdefinition j
    JOIN jobs_tenant t ON t.id = j.tenant_id
    WHERE j.shard = s.shard AND j.status = 'active' AND j.next_due_at IS NOT NULL
      AND j.next_due_at <= %(horizon)s AND t.paused_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM jobs_queuepause qp WHERE qp.tenant_id = j.tenant_id AND qp.queue = j.queue)
    ORDER BY j.next_due_at
    LIMIT 1
) AS d
ORDER BY d.next_due_at, s.shard;

-- name: advance_definitions
-- materialize.advance_definitions (materialize.materialize_jobs): move the next_due_at of a shard's
-- materialised jobs forward, one statement for all of them (one JSON object per job: its id, the
-- value its plan started from, the new one or null, its remaining_runs as read and the runs the
-- plan inserted), where Django's bulk_update builds a CASE of one branch per job. Compare-and-set
-- on both old values; the pass holds the rows' locks anyway. remaining_runs - spent stays NULL for
-- a job without a count, and the column's CHECK (>= 0) refuses to spend a run it does not have.
UPDATE jobs_jobdefinition j
SET next_due_at = v.next AT TIME ZONE 'UTC', remaining_runs = j.remaining_runs - v.spent
FROM jsonb_to_recordset(%(rows)s::jsonb) AS v(id bigint, was timestamp, next timestamp, left_was int, spent int)
WHERE j.id = v.id AND j.next_due_at = v.was AT TIME ZONE 'UTC'
  AND j.remaining_runs IS NOT DISTINCT FROM v.left_was;

-- name: bump_generation
-- generations.bump_generation (manage.py after_restore: %(force)s) and generations.follow_server (every new
-- connection: only when the server is not the one recorded): the next restore generation, and the
-- fencing token sequence moved to its first token, (generation << 40), above every token any
-- earlier generation issued on any server. One statement, so concurrent callers serialise on the
-- row: the second one finds the server recorded and changes nothing. The server is named by
-- its system identifier (another cluster: a dump loaded elsewhere, an upgrade), its timeline (a
-- promotion, a point-in-time restore) and the database's oid (a dump loaded into a new database).
-- No row (a schema older than the table's data, never in practice): it is made from the sequence,
-- not bumped. Returns the generation and why, or no row when nothing changed.
WITH here AS (
    SELECT (SELECT system_identifier FROM pg_control_system())::text
           || '/' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)
           || '/' || (SELECT oid FROM pg_database WHERE datname = current_database())::text AS server,
           (SELECT last_value FROM runs_fencing_token_seq) AS last_token
),
moved AS (
    INSERT INTO runs_generation AS g (id, number, server, changed_at, reason)
    SELECT 1, (last_token >> 40) + CASE WHEN %(force)s::boolean THEN 1 ELSE 0 END, server, statement_timestamp(),
           CASE WHEN %(force)s::boolean THEN %(reason)s::text ELSE 'recorded the server' END
    FROM here
    ON CONFLICT (id) DO UPDATE
    SET number = greatest(g.number, (SELECT last_token >> 40 FROM here)) + 1,
        server = excluded.server,
        changed_at = excluded.changed_at,
        reason = %(reason)s::text
                 || CASE WHEN g.server = excluded.server THEN '' ELSE ' (server was ' || g.server || ')' END
    WHERE %(force)s::boolean OR g.server <> excluded.server
    RETURNING g.number, g.reason
)
SELECT m.number, m.reason,
       CASE WHEN m.number << 40 > h.last_token THEN setval('runs_fencing_token_seq', m.number << 40, false) END
FROM moved m, here h;
