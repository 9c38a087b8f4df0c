"""The Celery app of the Celery benchmarks' workers (`celery -A bench.celery_app worker`).

Duetime's task (`duetime.execute`, installed as a team would) and, for the
side-by-side, a plain Celery task that records when it ran: one line per
execution appended to a file per worker process (start, end, the eta it was
given), so plain Celery is measured without a result backend or a database.
"""

import os
import time

from celery import Celery

from runs.celery_task import install

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")

app = Celery("duetime-bench")
app.config_from_object("django.conf:settings", namespace="CELERY")
install(app)
_sinks = {}


@app.task(name="bench.plain_noop", ignore_result=True)
def plain_noop(sink, eta=None):
    """Does nothing; records its start, end and eta (epoch seconds) in `<sink>/<pid>.txt`."""
    started = time.time()
    out = _sinks.get(sink)
    if out is None:
        out = _sinks[sink] = open(os.path.join(sink, f"{os.getpid()}.txt"), "a", buffering=1)
    out.write(f"{started} {time.time()} {'' if eta is None else eta}\n")
