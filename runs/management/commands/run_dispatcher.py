import logging

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from runs import metrics
from runs.dispatcher import Dispatcher
from runs.loop import GracefulStop, run_loop

log = logging.getLogger("duetime.dispatcher")


class Command(BaseCommand):
    requires_system_checks = ["duetime"]
    help = (
        "Claim due runs of celery jobs on the given queues and publish each to that Celery queue "
        "(the broker is CELERY_BROKER_URL), for a team's Celery workers to execute."
    )

    def add_arguments(self, parser):
        parser.add_argument("--queues", default="default", help="Comma-separated queues to serve (Celery queues).")
        parser.add_argument("--batch", type=int, default=0, help="Most runs per claim (default DUETIME_CLAIM_BATCH).")
        parser.add_argument(
            "--ahead",
            type=int,
            default=0,
            help="Most runs published and not yet started by a Celery worker (default DUETIME_DISPATCH_AHEAD).",
        )
        parser.add_argument(
            "--pack",
            type=int,
            default=0,
            help="Most runs in one Celery message once a backlog forms (default DUETIME_DISPATCH_BATCH; 1: one each).",
        )
        parser.add_argument(
            "--poll", type=float, default=0, help="Seconds between claims when idle (default DUETIME_POLL_SECONDS)."
        )
        parser.add_argument(
            "--dispatcher-id", default="", help="Name recorded on leases (default dispatcher@host:pid)."
        )
        parser.add_argument("--once", action="store_true", help="Claim and publish once, then exit.")
        metrics.add_port_argument(parser)

    def handle(self, *args, queues, batch, ahead, pack, poll, dispatcher_id, once, metrics_port, **options):
        queue_list = [q.strip() for q in queues.split(",") if q.strip()]
        if not queue_list:
            raise CommandError("--queues needs at least one queue name")
        if not settings.CELERY_BROKER_URL:
            raise CommandError("CELERY_BROKER_URL is not set: the dispatcher needs the Celery broker, e.g. amqp://...")
        poll = poll or settings.DUETIME_POLL_SECONDS
        stop = GracefulStop()
        dispatcher = Dispatcher(
            queue_list, dispatcher_id=dispatcher_id or None, batch=batch or None, ahead=ahead or None, pack=pack or None
        )
        log.info("dispatcher %s publishing %s to %s", dispatcher.dispatcher_id, ",".join(queue_list), _safe(dispatcher))
        metrics.serve(metrics.engine_port(metrics_port, "run_dispatcher"), log)
        try:
            run_loop(
                dispatcher.tick,
                rest=lambda result: stop.sleep(dispatcher.rest(result, poll)),
                done=lambda result: once,
                stop=stop,
                log=log,
                name=f"dispatcher {dispatcher.dispatcher_id}",
            )
        finally:
            dispatcher.disconnect()
            dispatcher.forget()
        log.info("dispatcher %s stopped", dispatcher.dispatcher_id)


def _safe(dispatcher):
    """The broker URL without its password, for the log."""
    return dispatcher.app.connection_for_write().as_uri()
