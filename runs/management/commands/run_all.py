import os
import signal
import socket
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
        parser.add_argument("--banner", default="", help="A line printed with the URL once the web process answers.")

    def handle(self, *args, host, port, queues, concurrency, banner, **options):
        manage = [sys.executable, "manage.py"]
        commands = {
            "web": [sys.executable, "-m", "daphne", "-b", host, "-p", str(port), "scheduler_project.asgi:application"],
            "scheduler": manage + ["run_scheduler"],
            "worker": manage + ["run_worker", "--queues", queues, "--concurrency", str(concurrency)],
        }
        stop = GracefulStop()
        children = {name: subprocess.Popen(cmd, env=os.environ.copy()) for name, cmd in commands.items()}
        announced = False
        exit_code = 0
        while not stop.requested:
            if not announced and accepts_connections(host, port):
                # Printed only now, so the URL works the moment a user reads it.
                lines = ["", f"  Duetime is running at http://{host}:{port}/admin/  (Ctrl-C to stop)"]
                self.stdout.write("\n".join(lines + ([f"  {banner}", ""] if banner else [""])))
                self.stdout.flush()
                announced = True
            for name, child in children.items():
                if child.poll() is not None:
                    self.stderr.write(f"{name} exited with code {child.returncode}; stopping the others")
                    exit_code = 1
                    stop.event.set()
            stop.sleep(0.5 if announced else 0.1)
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


def accepts_connections(host, port):
    """True once something accepts TCP connections on host:port (the web process is up)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
