import os
import signal
import subprocess
import sys
import time

from django.core.management.base import BaseCommand

from runs.loop import GracefulStop


class Command(BaseCommand):
    help = "Web (ASGI), scheduler and worker in one command: for a first look and small installs."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--queues", default="default")
        parser.add_argument("--concurrency", type=int, default=4)

    def handle(self, *args, host, port, queues, concurrency, **options):
        manage = [sys.executable, "manage.py"]
        commands = {
            "web": [sys.executable, "-m", "daphne", "-b", host, "-p", str(port), "scheduler_project.asgi:application"],
            "scheduler": manage + ["run_scheduler"],
            "worker": manage + ["run_worker", "--queues", queues, "--concurrency", str(concurrency)],
        }
        stop = GracefulStop()
        children = {name: subprocess.Popen(cmd, env=os.environ.copy()) for name, cmd in commands.items()}
        self.stdout.write(f"Duetime is running at http://{host}:{port}/admin/  (Ctrl-C to stop)")
        exit_code = 0
        while not stop.requested:
            for name, child in children.items():
                if child.poll() is not None:
                    self.stderr.write(f"{name} exited with code {child.returncode}; stopping the others")
                    exit_code = 1
                    stop.event.set()
            stop.sleep(0.5)
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 35
        for child in children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
        sys.exit(exit_code)
