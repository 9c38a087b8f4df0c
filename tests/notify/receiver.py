"""A webhook receiver on loopback, in a thread of the test process."""

import contextlib
import http.server
import threading


class Receiver(http.server.BaseHTTPRequestHandler):
    """Answers each POST with the next of `statuses` (the last one repeats) and keeps what it got.

    With `gate` (a threading.Event) set to one, it holds each answer until the gate opens: a slow receiver.
    """

    statuses = [200]
    seen = []
    gate = None

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.seen.append({"headers": dict(self.headers), "body": body, "path": self.path})
        if Receiver.gate is not None:
            Receiver.gate.wait(30)
        status = Receiver.statuses.pop(0) if len(Receiver.statuses) > 1 else Receiver.statuses[0]
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"thanks" if status < 300 else b"try later")

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve():
    """Serve Receiver on a free loopback port; yields its URL and stops the server on leaving."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    Receiver.seen, Receiver.statuses, Receiver.gate = [], [200], None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/duetime/events"
    finally:
        server.shutdown()
        server.server_close()
