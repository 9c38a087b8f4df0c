"""`python manage.py bench WORKLOAD`: end-to-end measurements against real processes.

Each workload creates its own tenant (`bench-<unique>`) and queue, starts
real `run_scheduler` and `run_worker` processes, waits for the end, and
reports figures computed from the database (never from the harness clock).
Rows are left in place for inspection.
"""
