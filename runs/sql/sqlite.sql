-- Hot-path queries for SQLite (the embedded default). Same names as
-- postgres.sql. SQLite has no SKIP LOCKED and no sequences: every write runs
-- inside an IMMEDIATE transaction, which holds the database's only write
-- lock, so a conditional UPDATE is the compare-and-set. Times are passed in
-- from the one machine's clock, as the backend stores them (UTC text).

-- name: claim_candidates
-- claims.claim: up to :n due runs per (tenant, queue, priority) of active
-- jobs, oldest first, with the tenant's free room and, for jobs with a limit
-- or an overlap policy, the count of their leased runs.
SELECT c.id, c.tenant_id, c.job_id, c.priority, c.origin, c.available_at, c.concurrency, c.overlap_policy,
       CASE WHEN c.concurrency IS NOT NULL OR c.overlap_policy <> 'allow'
            THEN (SELECT count(*) FROM runs_run l WHERE l.tenant_id = c.tenant_id AND l.job_id = c.job_id AND l.state = 'leased')
            ELSE 0 END,
       (SELECT t.max_concurrent_runs FROM jobs_tenant t WHERE t.id = c.tenant_id)
         - (SELECT count(*) FROM runs_run l WHERE l.tenant_id = c.tenant_id AND l.state = 'leased')
FROM (
    SELECT r.id, r.tenant_id, r.job_id, r.priority, r.origin, r.available_at, j.concurrency, j.overlap_policy,
           row_number() OVER (PARTITION BY r.tenant_id, r.queue, r.priority ORDER BY r.available_at, r.id) AS turn
    FROM runs_run r
    JOIN jobs_jobdefinition j ON j.id = r.job_id AND j.status = 'active'
    WHERE r.state IN ('scheduled', 'retry_wait')
      AND r.available_at <= %(now)s
      AND r.queue IN (SELECT value FROM json_each(%(queues)s))
      AND (%(tenant)s IS NULL OR r.tenant_id = %(tenant)s)
) c
WHERE c.turn <= %(n)s;

-- name: lease_runs
-- claims.claim: lease one chosen run (conditional on it still being
-- claimable) and return what the worker needs. Lease capped by the timeout.
UPDATE runs_run
SET state = 'leased',
    attempt = attempt + 1,
    fencing_token = %(token)s,
    worker_id = %(worker)s,
    started_at = %(now)s,
    lease_expires_at = strftime('%%Y-%%m-%%d %%H:%%M:%%f', %(now)s, '+' || min(%(lease)s, timeout_seconds) || ' seconds')
WHERE id = %(id)s AND state IN ('scheduled', 'retry_wait')
RETURNING id, tenant_id, job_id,
          (SELECT name FROM jobs_jobdefinition WHERE id = job_id),
          (SELECT target_kind FROM jobs_jobdefinition WHERE id = job_id),
          (SELECT target_ref FROM jobs_jobdefinition WHERE id = job_id),
          queue, attempt, max_attempts, idempotency_key, fencing_token, payload, due_at, available_at,
          started_at, lease_expires_at, timeout_seconds;

-- name: heartbeat
-- transitions.heartbeat: extend the lease while the token is current and the
-- run leased, never past the attempt's start + the job's timeout.
UPDATE runs_run
SET lease_expires_at = min(
        strftime('%%Y-%%m-%%d %%H:%%M:%%f', %(now)s, '+' || %(lease)s || ' seconds'),
        strftime('%%Y-%%m-%%d %%H:%%M:%%f', started_at, '+' || timeout_seconds || ' seconds'))
WHERE id = %(id)s AND fencing_token = %(token)s AND state = 'leased'
RETURNING lease_expires_at;

-- name: next_fencing_tokens
-- transitions.next_fencing_tokens: reserve %(n)s values of the fencing
-- counter; returns the last. Inside the caller's IMMEDIATE transaction.
-- An upsert, so a flushed table (tests) starts the counter again rather than failing.
INSERT INTO runs_counter (name, value) VALUES ('fencing_token', %(n)s)
ON CONFLICT (name) DO UPDATE SET value = value + excluded.value
RETURNING value;
