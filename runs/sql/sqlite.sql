-- Hot-path queries for SQLite (the embedded default). Same names as
-- postgres.sql, same results; each name is the Python function that runs it
-- (through runs.sql.execute). SQLite has no SKIP LOCKED, no sequences and no
-- data-modifying CTEs: every write runs inside an IMMEDIATE transaction,
-- which holds the database's only write lock, so a conditional UPDATE is the
-- compare-and-set, and a query that writes several tables is several
-- statements, run in order in one transaction (runs.sql.execute).
-- Lists arrive as JSON arrays (read with json_each), times as the backend
-- stores them (UTC text), `now` from the one machine's clock.
-- A time computed here is written as Django writes it (`.ffffff`, or no
-- fraction at all on a whole second), so text comparisons with the ORM's
-- parameters stay exact.

-- name: lock_ready_tenants
-- claims.lock_ready_tenants (claims.claim): the tenants that have a due run
-- on the wanted queues, in id order. Nothing to lock: the IMMEDIATE
-- transaction already serialises claims. First the ready set is settled
-- (runs.models.ReadyMark): a (tenant, queue) with due marks but no due
-- claimable run gets a mark at its next claimable run, then loses its due
-- marks. Then the tenants of the marks still due: only the marks due now are
-- read, so tenants whose runs are all scheduled ahead cost nothing. A paused
-- tenant (paused_at) is passed over, and so is a queue it paused on its own
-- (a jobs_queuepause row).
INSERT INTO runs_readymark (tenant_id, queue, due_at)
SELECT d.tenant_id, d.queue, d.next
FROM (SELECT m.tenant_id, m.queue,
             (SELECT min(r.available_at) FROM runs_run r
              WHERE r.tenant_id = m.tenant_id AND r.queue = m.queue AND r.state IN ('scheduled', 'retry_wait')) AS next
      FROM runs_readymark m
      WHERE m.queue IN (SELECT value FROM json_each(%(queues)s)) AND m.due_at <= %(now)s
        AND (%(tenant)s IS NULL OR m.tenant_id = %(tenant)s)
      GROUP BY m.tenant_id, m.queue) d
WHERE d.next > %(now)s;
DELETE FROM runs_readymark
WHERE queue IN (SELECT value FROM json_each(%(queues)s)) AND due_at <= %(now)s
  AND (%(tenant)s IS NULL OR tenant_id = %(tenant)s)
  AND NOT EXISTS (SELECT 1 FROM runs_run r
                  WHERE r.tenant_id = runs_readymark.tenant_id AND r.queue = runs_readymark.queue
                    AND r.state IN ('scheduled', 'retry_wait') AND r.available_at <= %(now)s);
SELECT t.id
FROM jobs_tenant t
WHERE t.id IN (SELECT m.tenant_id FROM runs_readymark m
               WHERE m.queue IN (SELECT value FROM json_each(%(queues)s)) AND m.due_at <= %(now)s
                 AND (%(tenant)s IS NULL OR m.tenant_id = %(tenant)s)
                 AND m.queue NOT IN (SELECT qp.queue FROM jobs_queuepause qp WHERE qp.tenant_id = m.tenant_id))
  -- A dedicated worker (run_worker --tenants / --exclude-tenants) serves only its tenants.
  AND (%(only_tenants)s IS NULL OR t.id IN (SELECT value FROM json_each(%(only_tenants)s)))
  AND t.id NOT IN (SELECT value FROM json_each(%(except_tenants)s))
  AND t.paused_at IS NULL
ORDER BY t.id;

-- name: wait_for_ready_tenants
-- claims.wait_for_ready_tenants: the tenants of the marks due, as lock_ready_tenants
-- (SQLite passes no tenant over, so there is nothing to wait for).
SELECT t.id
FROM jobs_tenant t
WHERE t.id IN (SELECT m.tenant_id FROM runs_readymark m
               WHERE m.queue IN (SELECT value FROM json_each(%(queues)s)) AND m.due_at <= %(now)s
                 AND (%(tenant)s IS NULL OR m.tenant_id = %(tenant)s)
                 AND m.queue NOT IN (SELECT qp.queue FROM jobs_queuepause qp WHERE qp.tenant_id = m.tenant_id))
  -- A dedicated worker (run_worker --tenants / --exclude-tenants) serves only its tenants.
  AND (%(only_tenants)s IS NULL OR t.id IN (SELECT value FROM json_each(%(only_tenants)s)))
  AND t.id NOT IN (SELECT value FROM json_each(%(except_tenants)s))
  AND t.paused_at IS NULL
ORDER BY t.id;

-- name: claim_candidates
-- claims.claim_candidates (claims.claim): up to %(per_tenant)s due runs per (tenant,
-- queue, priority) of active jobs, oldest first, with the tenant's free room
-- and, for jobs with a limit or an overlap policy, the count of their leased runs; then the run's queue
-- and the job's concurrency group, for the queue and group limits (runs.limits), and whether a
-- queue limit applies to it (so a claim with none reads none).
-- `kinds` (NULL: all) leaves the runs of other target kinds to their own consumers.
-- Runs of a queue the tenant paused (a jobs_queuepause row) are left out.
SELECT c.id, c.tenant_id, c.job_id, c.priority, c.origin, c.available_at, c.concurrency, c.overlap_policy,
       CASE WHEN c.concurrency IS NOT NULL OR c.overlap_policy <> 'allow'
            THEN (SELECT count(*) FROM runs_run l WHERE l.tenant_id = c.tenant_id AND l.job_id = c.job_id AND l.state = 'leased')
            ELSE 0 END,
       (SELECT t.max_concurrent_runs FROM jobs_tenant t WHERE t.id = c.tenant_id)
         - (SELECT count(*) FROM runs_run l WHERE l.tenant_id = c.tenant_id AND l.state = 'leased'),
       c.queue, c.concurrency_group, c.concurrency_group_limit,
       EXISTS (SELECT 1 FROM jobs_queuelimit ql WHERE ql.queue = c.queue AND (ql.tenant_id IS NULL OR ql.tenant_id = c.tenant_id))
FROM (
    SELECT r.id, r.tenant_id, r.job_id, r.priority, r.origin, r.available_at, j.concurrency, j.overlap_policy,
           r.queue, j.concurrency_group, j.concurrency_group_limit,
           row_number() OVER (PARTITION BY r.tenant_id, r.queue, r.priority ORDER BY r.available_at, r.id) AS turn
    FROM runs_run r
    JOIN jobs_jobdefinition j ON j.id = r.job_id AND j.status = 'active'
    WHERE r.state IN ('scheduled', 'retry_wait')
      AND (%(kinds)s IS NULL OR j.target_kind IN (SELECT value FROM json_each(%(kinds)s)))
      AND r.available_at <= %(now)s
      AND r.queue IN (SELECT value FROM json_each(%(queues)s))
      AND r.tenant_id IN (SELECT value FROM json_each(%(tenants)s))
      AND NOT EXISTS (SELECT 1 FROM jobs_queuepause qp WHERE qp.tenant_id = r.tenant_id AND qp.queue = r.queue)
      -- The tenant's failure breaker (runs.breaker) holds its retries while open.
      AND (r.state = 'scheduled'
           OR NOT EXISTS (SELECT 1 FROM jobs_tenant bt WHERE bt.id = r.tenant_id AND bt.breaker_opened_at IS NOT NULL))
) c
WHERE c.turn <= %(per_tenant)s
  -- No more than the tenant's room could take, and one more (held back: what tells that its cap holds it).
  AND c.turn <= max(0, (SELECT t.max_concurrent_runs FROM jobs_tenant t WHERE t.id = c.tenant_id)
                       - (SELECT count(*) FROM runs_run l WHERE l.tenant_id = c.tenant_id AND l.state = 'leased')) + 1;

-- name: lease_runs
-- transitions.lease_runs (claims.claim): lease the chosen runs (each still
-- claimable) and return what a worker needs. The fencing counter moves on by
-- one per chosen run; the lowest id gets the lowest of those tokens. The
-- lease is capped by the job's timeout.
INSERT INTO runs_counter (name, value) VALUES ('fencing_token', json_array_length(%(ids)s))
ON CONFLICT (name) DO UPDATE SET value = value + excluded.value;
UPDATE runs_run
SET state = 'leased',
    attempt = attempt + 1,
    fencing_token = (SELECT value FROM runs_counter WHERE name = 'fencing_token')
                    - (SELECT count(*) FROM json_each(%(ids)s) later WHERE later.value > runs_run.id),
    worker_id = %(worker)s,
    started_at = %(now)s,
    lease_expires_at = strftime('%%Y-%%m-%%d %%H:%%M:%%f', %(now)s, '+' || min(%(lease)s, timeout_seconds) || ' seconds')
WHERE id IN (SELECT value FROM json_each(%(ids)s)) AND state IN ('scheduled', 'retry_wait')
RETURNING id, tenant_id, job_id,
          (SELECT name FROM jobs_jobdefinition WHERE id = job_id),
          (SELECT target_kind FROM jobs_jobdefinition WHERE id = job_id),
          (SELECT target_ref FROM jobs_jobdefinition WHERE id = job_id),
          queue, attempt, max_attempts, idempotency_key, fencing_token, payload, due_at, available_at,
          started_at, lease_expires_at, timeout_seconds, args,
          (SELECT task_module_prefixes FROM jobs_tenant WHERE id = tenant_id);

-- name: heartbeat
-- transitions.heartbeat: extend the lease while the token is current and the
-- run leased, never past the attempt's start + the job's timeout.
UPDATE runs_run
SET lease_expires_at = min(
        strftime('%%Y-%%m-%%d %%H:%%M:%%f', %(now)s, '+' || %(lease)s || ' seconds'),
        strftime('%%Y-%%m-%%d %%H:%%M:%%f', started_at, '+' || timeout_seconds || ' seconds'))
WHERE id = %(id)s AND fencing_token = %(token)s AND state = 'leased'
  AND fencing_token >= (SELECT coalesce(max(number), 0) << 40 FROM runs_generation)  -- not of an older restore generation
RETURNING lease_expires_at;

-- name: complete_runs
-- transitions.complete_runs (complete, complete_many): finish many attempts.
-- `held` is the input joined to the runs whose fencing token matches and
-- that are still leased; the attempt rows (with the return value's JSON
-- text, or NULL) and dead letters are written from
-- it before the runs move (the move changes what `held` selects). Backoff
-- before retry n is full jitter: uniform(0, min(retry_max, retry_base * 2^(n-1))).
-- Each moved run comes back with its job, tenant, attempt, token, key and holder: the
-- metrics and the move log (runs/move_log.py) read those rows, never the runs again.
-- A run that succeeds goes into history (history_day: today), its attempts with it; a run
-- that dies stays open (9999-12-31) with its dead letter, as on PostgreSQL.
WITH input AS (
    SELECT i.value AS id, %(tokens)s ->> i.key AS token, %(outcomes)s ->> i.key AS outcome,
           %(errors)s ->> i.key AS error, %(retryable)s ->> i.key AS retryable, %(results)s ->> i.key AS result
    FROM json_each(%(ids)s) i
)
INSERT INTO runs_attempt (run_id, attempt, fencing_token, worker_id, available_at, started_at, ended_at, outcome, error,
                          return_value, history_day)
SELECT r.id, r.attempt, r.fencing_token, r.worker_id, r.available_at, r.started_at, %(now)s, i.outcome, i.error,
       i.result, '9999-12-31'
FROM input i
JOIN runs_run r ON r.id = i.id AND r.fencing_token = i.token AND r.state = 'leased'
    AND r.fencing_token >= (SELECT coalesce(max(number), 0) << 40 FROM runs_generation);
WITH input AS (
    SELECT i.value AS id, %(tokens)s ->> i.key AS token, %(outcomes)s ->> i.key AS outcome
    FROM json_each(%(ids)s) i
)
UPDATE runs_attempt
SET history_day = date(%(now)s)
WHERE history_day = '9999-12-31'
  AND run_id IN (SELECT r.id FROM input i
                 JOIN runs_run r ON r.id = i.id AND r.fencing_token = i.token AND r.state = 'leased'
    AND r.fencing_token >= (SELECT coalesce(max(number), 0) << 40 FROM runs_generation)
                 WHERE i.outcome = 'succeeded');
WITH input AS (
    SELECT i.value AS id, %(tokens)s ->> i.key AS token, %(outcomes)s ->> i.key AS outcome,
           %(errors)s ->> i.key AS error, %(retryable)s ->> i.key AS retryable
    FROM json_each(%(ids)s) i
)
INSERT INTO dlq_deadletter (run_id, job_id, tenant_id, last_error, dead_at, resolved_by, history_day)
SELECT r.id, r.job_id, r.tenant_id, i.error, %(now)s, '', '9999-12-31'
FROM input i
JOIN runs_run r ON r.id = i.id AND r.fencing_token = i.token AND r.state = 'leased'
    AND r.fencing_token >= (SELECT coalesce(max(number), 0) << 40 FROM runs_generation)
WHERE i.outcome <> 'succeeded' AND NOT (i.retryable AND r.attempt < r.max_attempts);
WITH input AS (
    SELECT i.value AS id, %(tokens)s ->> i.key AS token, %(outcomes)s ->> i.key AS outcome,
           %(retryable)s ->> i.key AS retryable
    FROM json_each(%(ids)s) i
)
INSERT INTO runs_readymark (tenant_id, queue, due_at)
SELECT r.tenant_id, r.queue, %(now)s
FROM input i
JOIN runs_run r ON r.id = i.id AND r.fencing_token = i.token AND r.state = 'leased'
WHERE i.outcome <> 'succeeded' AND i.retryable AND r.attempt < r.max_attempts
GROUP BY r.tenant_id, r.queue;
WITH input AS (
    SELECT i.value AS id, %(tokens)s ->> i.key AS token, %(outcomes)s ->> i.key AS outcome,
           %(errors)s ->> i.key AS error, %(retryable)s ->> i.key AS retryable
    FROM json_each(%(ids)s) i
),
held AS (
    SELECT r.id, i.error,
           CASE WHEN i.outcome = 'succeeded' THEN 'succeeded'
                WHEN i.retryable AND r.attempt < r.max_attempts THEN 'retry_wait'
                ELSE 'dead' END AS next_state,
           julianday(%(now)s) + (random() / 18446744073709551616.0 + 0.5)
               * min(j.retry_max_seconds, j.retry_base_seconds * (1 << min(r.attempt - 1, 62))) / 86400.0 AS retry_day
    FROM input i
    JOIN runs_run r ON r.id = i.id AND r.fencing_token = i.token AND r.state = 'leased'
    AND r.fencing_token >= (SELECT coalesce(max(number), 0) << 40 FROM runs_generation)
    JOIN jobs_jobdefinition j ON j.id = r.job_id
)
UPDATE runs_run
SET state = h.next_state,
    lease_expires_at = NULL,
    available_at = CASE WHEN h.next_state <> 'retry_wait' THEN runs_run.available_at
                        WHEN strftime('%%f', h.retry_day) LIKE '%%.000' THEN strftime('%%Y-%%m-%%d %%H:%%M:%%S', h.retry_day)
                        ELSE strftime('%%Y-%%m-%%d %%H:%%M:%%f', h.retry_day) || '000' END,
    finished_at = CASE WHEN h.next_state = 'retry_wait' THEN NULL ELSE %(now)s END,
    last_error = h.error,
    history_day = CASE WHEN h.next_state = 'succeeded' THEN date(%(now)s) ELSE runs_run.history_day END
FROM held h
WHERE runs_run.id = h.id
RETURNING id, state, available_at, job_id, tenant_id, attempt, fencing_token, idempotency_key, worker_id, queue,
          priority, (SELECT name FROM jobs_jobdefinition WHERE id = job_id);

-- name: expire_leases
-- transitions.expire_leases (reap, the scheduler's step): leases past their
-- expiry, at most %(n)s per pass, oldest first (then by id, so each statement
-- below picks the same runs). A run whose lease reached its start + timeout
-- timed out; otherwise its worker vanished (lease_expired). Either way:
-- retry_wait with backoff while attempts are left, else dead with a dead letter.
-- Each moved run comes back with its job, tenant, attempt, token, key and holder: the
-- metrics and the move log (runs/move_log.py) read those rows, never the runs again.
WITH held AS (
    SELECT r.* FROM runs_run r
    WHERE r.state = 'leased' AND r.lease_expires_at < %(now)s
    ORDER BY r.lease_expires_at, r.id
    LIMIT %(n)s
)
INSERT INTO runs_attempt (run_id, attempt, fencing_token, worker_id, available_at, started_at, ended_at, outcome, error,
                          history_day)
SELECT h.id, h.attempt, h.fencing_token, h.worker_id, h.available_at, h.started_at, %(now)s,
       CASE WHEN strftime('%%Y-%%m-%%d %%H:%%M:%%f', h.lease_expires_at)
                 >= strftime('%%Y-%%m-%%d %%H:%%M:%%f', h.started_at, '+' || h.timeout_seconds || ' seconds')
            THEN 'timed_out' ELSE 'lease_expired' END,
       CASE WHEN strftime('%%Y-%%m-%%d %%H:%%M:%%f', h.lease_expires_at)
                 >= strftime('%%Y-%%m-%%d %%H:%%M:%%f', h.started_at, '+' || h.timeout_seconds || ' seconds')
            THEN 'timed out' ELSE 'lease expired' END,
       '9999-12-31'
FROM held h;
WITH held AS (
    SELECT r.* FROM runs_run r
    WHERE r.state = 'leased' AND r.lease_expires_at < %(now)s
    ORDER BY r.lease_expires_at, r.id
    LIMIT %(n)s
)
INSERT INTO dlq_deadletter (run_id, job_id, tenant_id, last_error, dead_at, resolved_by, history_day)
SELECT h.id, h.job_id, h.tenant_id,
       CASE WHEN strftime('%%Y-%%m-%%d %%H:%%M:%%f', h.lease_expires_at)
                 >= strftime('%%Y-%%m-%%d %%H:%%M:%%f', h.started_at, '+' || h.timeout_seconds || ' seconds')
            THEN 'timed out' ELSE 'lease expired' END,
       %(now)s, '', '9999-12-31'
FROM held h
WHERE h.attempt >= h.max_attempts;
INSERT INTO runs_readymark (tenant_id, queue, due_at)
SELECT h.tenant_id, h.queue, %(now)s
FROM (SELECT r.* FROM runs_run r
      WHERE r.state = 'leased' AND r.lease_expires_at < %(now)s
      ORDER BY r.lease_expires_at, r.id
      LIMIT %(n)s) h
WHERE h.attempt < h.max_attempts
GROUP BY h.tenant_id, h.queue;
WITH held AS (
    SELECT r.id, r.worker_id,
           strftime('%%Y-%%m-%%d %%H:%%M:%%f', r.lease_expires_at)
               >= strftime('%%Y-%%m-%%d %%H:%%M:%%f', r.started_at, '+' || r.timeout_seconds || ' seconds') AS timed_out,
           CASE WHEN r.attempt < r.max_attempts THEN 'retry_wait' ELSE 'dead' END AS next_state,
           julianday(%(now)s) + (random() / 18446744073709551616.0 + 0.5)
               * min(j.retry_max_seconds, j.retry_base_seconds * (1 << min(r.attempt - 1, 62))) / 86400.0 AS retry_day
    FROM runs_run r
    JOIN jobs_jobdefinition j ON j.id = r.job_id
    WHERE r.state = 'leased' AND r.lease_expires_at < %(now)s
    ORDER BY r.lease_expires_at, r.id
    LIMIT %(n)s
)
UPDATE runs_run
SET state = h.next_state,
    lease_expires_at = NULL,
    available_at = CASE WHEN h.next_state <> 'retry_wait' THEN runs_run.available_at
                        WHEN strftime('%%f', h.retry_day) LIKE '%%.000' THEN strftime('%%Y-%%m-%%d %%H:%%M:%%S', h.retry_day)
                        ELSE strftime('%%Y-%%m-%%d %%H:%%M:%%f', h.retry_day) || '000' END,
    finished_at = CASE WHEN h.next_state = 'dead' THEN %(now)s END,
    last_error = CASE WHEN h.timed_out THEN 'timed out: ran longer than the job''s timeout_seconds'
                      ELSE 'lease expired: worker ' || h.worker_id || ' stopped heartbeating' END
FROM held h
WHERE runs_run.id = h.id
-- RETURNING sees only this table (and its new values): the outcome is read back from last_error.
RETURNING id, state, available_at, job_id, tenant_id, attempt, fencing_token, idempotency_key, worker_id, queue,
          priority, (SELECT name FROM jobs_jobdefinition WHERE id = job_id),
          CASE WHEN last_error LIKE 'timed out:%%' THEN 'timed_out' ELSE 'lease_expired' END;

-- name: next_fencing_tokens
-- shards.next_fencing_tokens: reserve %(n)s values of the fencing counter and
-- return them, lowest first (for the epochs of shard leases). An upsert, so
-- a flushed table (tests) starts the counter again rather than failing.
INSERT INTO runs_counter (name, value) VALUES ('fencing_token', %(n)s)
ON CONFLICT (name) DO UPDATE SET value = value + excluded.value;
WITH RECURSIVE reserved(value) AS (
    SELECT value - %(n)s + 1 FROM runs_counter WHERE name = 'fencing_token'
    UNION ALL
    SELECT value + 1 FROM reserved
    WHERE value < (SELECT value FROM runs_counter WHERE name = 'fencing_token')
)
SELECT value FROM reserved;

-- name: insert_runs
-- enqueue.insert_runs: insert new runs, one JSON object per run, in one
-- statement whatever their number. A new run has no attempt, lease or error
-- yet, so those columns are constants here. A row that would break a unique
-- constraint (the job's occurrence or the API key is taken) is passed over
-- (`WHERE true` lets SQLite parse ON CONFLICT after a SELECT); RETURNING
-- names the rows that went in. First, the ready marks of the claimable rows
-- (runs.models.ReadyMark), one per (tenant, queue) at their earliest
-- available_at: a row passed over leaves a mark too early, which costs a claim a look.
INSERT INTO runs_readymark (tenant_id, queue, due_at)
SELECT r.value ->> 'tenant_id', r.value ->> 'queue', min(r.value ->> 'available_at')
FROM json_each(%(rows)s) r
WHERE r.value ->> 'state' IN ('scheduled', 'retry_wait')
GROUP BY r.value ->> 'tenant_id', r.value ->> 'queue';
INSERT INTO runs_run (job_id, tenant_id, origin, due_at, available_at, state, attempt, max_attempts, timeout_seconds,
                      idempotency_key, worker_id, queue, priority, shard, payload, finished_at, last_error, reason,
                      covers_until, created_at, history_day)
SELECT r.value ->> 'job_id', r.value ->> 'tenant_id', r.value ->> 'origin', r.value ->> 'due_at',
       r.value ->> 'available_at', r.value ->> 'state', 0, r.value ->> 'max_attempts', r.value ->> 'timeout_seconds',
       r.value ->> 'idempotency_key', '', r.value ->> 'queue', r.value ->> 'priority', r.value ->> 'shard',
       r.value -> 'payload', r.value ->> 'finished_at', '', r.value ->> 'reason', r.value ->> 'covers_until',
       %(created_at)s,
       CASE WHEN r.value ->> 'state' IN ('succeeded', 'cancelled', 'skipped') THEN date(r.value ->> 'finished_at')
            ELSE '9999-12-31' END
FROM json_each(%(rows)s) r
WHERE true
ON CONFLICT DO NOTHING
RETURNING id, job_id, idempotency_key;

-- name: insert_fresh_run
-- enqueue.insert_fresh_run: one scheduled run whose key no run holds (a fresh
-- uuid), as one VALUES row, after its ready mark (runs.models.ReadyMark). The only insert
-- that sets `args` (a Django task's positional arguments).
INSERT INTO runs_readymark (tenant_id, queue, due_at)
SELECT %(tenant_id)s, %(queue)s, %(available_at)s WHERE %(state)s IN ('scheduled', 'retry_wait');
INSERT INTO runs_run (job_id, tenant_id, origin, due_at, available_at, state, attempt, max_attempts, timeout_seconds,
                      idempotency_key, worker_id, queue, priority, shard, payload, args, last_error, reason,
                      created_at, history_day)
VALUES (%(job_id)s, %(tenant_id)s, %(origin)s, %(due_at)s, %(available_at)s, %(state)s, 0, %(max_attempts)s,
        %(timeout_seconds)s, %(idempotency_key)s, '', %(queue)s, %(priority)s, %(shard)s, %(payload)s, %(args)s, '',
        %(reason)s, %(created_at)s, '9999-12-31')
ON CONFLICT DO NOTHING
RETURNING id, job_id, idempotency_key;

-- name: start_attempt
-- transitions.start_attempt (the Celery task runs.celery_execute): take over a
-- lease the dispatcher published, once, while its fencing token is current and
-- the dispatcher still holds it; records the executor and the real start.
UPDATE runs_run
SET worker_id = %(worker)s,
    started_at = %(now)s,
    lease_expires_at = strftime('%%Y-%%m-%%d %%H:%%M:%%f', %(now)s, '+' || min(%(lease)s, timeout_seconds) || ' seconds')
WHERE id = %(id)s AND fencing_token = %(token)s AND worker_id = %(dispatched_by)s AND state = 'leased'
  AND fencing_token >= (SELECT coalesce(max(number), 0) << 40 FROM runs_generation)  -- not of an older restore generation
RETURNING lease_expires_at;

-- name: start_attempts
-- transitions.start_attempts (the Celery task duetime.execute_batch): take over every lease of
-- one batch message at once, on start_attempt's terms; also stamps a batch's runs again.
UPDATE runs_run
SET worker_id = %(worker)s,
    started_at = %(now)s,
    lease_expires_at = strftime('%%Y-%%m-%%d %%H:%%M:%%f', %(now)s, '+' || min(%(lease)s, timeout_seconds) || ' seconds')
WHERE (id, fencing_token) IN (SELECT i.value, %(tokens)s ->> i.key FROM json_each(%(ids)s) i)
  AND worker_id = %(dispatched_by)s AND state = 'leased'
  AND fencing_token >= (SELECT coalesce(max(number), 0) << 40 FROM runs_generation)  -- not of an older restore generation
RETURNING id, lease_expires_at;

-- name: waiting
-- dispatcher.waiting: runs this dispatcher published that no Celery worker took over yet.
SELECT count(*) FROM runs_run WHERE state = 'leased' AND worker_id = %(dispatcher)s;

-- name: fold_attempts
-- rollups.tick: the same groups as PostgreSQL's fold_attempts. Lateness in
-- exact microseconds: whole seconds from strftime('%%s') plus the stored
-- fraction (3 or 6 digits, or none), since julianday() differences lose a
-- fraction of a millisecond; LN is Django's function where SQLite has none.
WITH span AS (
    SELECT a.id, a.attempt, a.started_at, a.ended_at, a.outcome, a.available_at, a.run_id
    FROM runs_attempt a
    WHERE a.id >= (SELECT min(id) FROM runs_attempt WHERE id > %(after)s)
      AND a.id < (SELECT min(id) FROM runs_attempt WHERE id > %(after)s) + %(batch)s
),
cut AS (
    SELECT coalesce(min(id), 9223372036854775807) AS first_unsettled
    FROM span
    WHERE ended_at > strftime('%%Y-%%m-%%d %%H:%%M:%%f', %(now)s, '-' || %(settle)s || ' seconds')
),
micros AS (
    SELECT s.id, s.attempt, s.started_at, s.ended_at, s.outcome, r.tenant_id, r.job_id,
           CAST(strftime('%%s', s.started_at) AS INTEGER) * 1000000
             + CAST(substr(s.started_at || '000000', 21, 6) AS INTEGER) AS started_us,
           max(CAST(strftime('%%s', s.available_at) AS INTEGER) * 1000000
                 + CAST(substr(s.available_at || '000000', 21, 6) AS INTEGER),
               CAST(strftime('%%s', r.created_at) AS INTEGER) * 1000000
                 + CAST(substr(r.created_at || '000000', 21, 6) AS INTEGER)) AS from_us
    FROM span s JOIN runs_run r ON r.id = s.run_id, cut
    WHERE s.id < cut.first_unsettled
),
settled AS (
    SELECT m.*, CASE WHEN m.attempt = 1 THEN max(0, (m.started_us - m.from_us) / 1000) END AS ms
    FROM micros m
)
SELECT tenant_id, job_id, strftime('%%Y-%%m-%%d %%H:%%M:00', started_at) AS started_minute,
       strftime('%%Y-%%m-%%d %%H:%%M:00', ended_at) AS ended_minute, outcome,
       CASE WHEN ms IS NULL THEN NULL WHEN ms < 1 THEN 0
            ELSE min(%(max_bin)s, 1 + CAST(LN(ms) / LN(%(growth)s) AS INTEGER)) END AS bin,
       count(*) AS attempts, count(ms) AS first_attempts, coalesce(sum(ms), 0) AS ms_sum,
       coalesce(max(ms), 0) AS ms_max, (SELECT max(id) FROM settled) AS last_id
FROM settled
GROUP BY 1, 2, 3, 4, 5, 6;

-- name: due_shards
-- materialize.due_shards (materialize.materialize): which of %(shards)s have an active job due by
-- %(horizon)s that no pause holds, the shard of the most urgent one first (one min() per shard on
-- job_due_by_shard; the pauses are materialize._due's filters).
SELECT shard
FROM (
    SELECT s.value AS shard,
           (SELECT min(j.next_due_at)
            FROM jobs_jobdefinition j
            JOIN jobs_tenant t ON t.id = j.tenant_id
            WHERE j.shard = s.value AND j.status = 'active' AND j.next_due_at IS NOT NULL
              AND j.next_due_at <= %(horizon)s AND t.paused_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM jobs_queuepause qp WHERE qp.tenant_id = j.tenant_id AND qp.queue = j.queue)
           ) AS first_due
    FROM json_each(%(shards)s) AS s
)
WHERE first_due IS NOT NULL
ORDER BY first_due, shard;

-- name: advance_definitions
-- materialize.advance_definitions (materialize.materialize_jobs): move the next_due_at of a shard's
-- materialised jobs forward in one statement (one JSON object per job: id, old value, new value or
-- null, as UTC text, the form the backend stores; its remaining_runs as read and the runs inserted);
-- compare-and-set on both old values. remaining_runs - spent stays NULL for a job without a count.
UPDATE jobs_jobdefinition
SET next_due_at = v.next, remaining_runs = jobs_jobdefinition.remaining_runs - v.spent
FROM (SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.was') AS was,
             json_extract(value, '$.next') AS next, json_extract(value, '$.left_was') AS left_was,
             json_extract(value, '$.spent') AS spent
      FROM json_each(%(rows)s)) AS v
WHERE jobs_jobdefinition.id = v.id AND jobs_jobdefinition.next_due_at = v.was
  AND jobs_jobdefinition.remaining_runs IS v.left_was;

-- name: bump_generation
-- generations.bump_generation (manage.py after_restore): the next restore generation, and the fencing
-- counter moved so that the next token is its first, (generation << 40), above every token an
-- earlier generation issued. SQLite has no server to follow: only `force` bumps.
INSERT INTO runs_counter (name, value) VALUES ('fencing_token', 0) ON CONFLICT (name) DO NOTHING;
INSERT INTO runs_generation (id, number, server, changed_at, reason)
VALUES (1, ((SELECT value FROM runs_counter WHERE name = 'fencing_token') >> 40) + %(force)s, '', %(now)s, %(reason)s)
ON CONFLICT (id) DO UPDATE
SET number = max(number, (SELECT value FROM runs_counter WHERE name = 'fencing_token') >> 40) + 1,
    changed_at = excluded.changed_at,
    reason = excluded.reason
WHERE %(force)s;
UPDATE runs_counter
SET value = ((SELECT number FROM runs_generation WHERE id = 1) << 40) - 1
WHERE name = 'fencing_token' AND value < ((SELECT number FROM runs_generation WHERE id = 1) << 40) - 1;
SELECT number, reason FROM runs_generation WHERE id = 1 AND %(force)s;
