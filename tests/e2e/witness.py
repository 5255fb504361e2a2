"""A checkpoint witness for the tests: keeps every head POSTed to it, in
order, and answers GET with them, one per line. Prints its port once it
listens. Usage: witness.py PORT (0: any free port)."""

import http.server
import sys
import threading

heads = []
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n).decode("utf-8", "replace").strip()
        with lock:
            heads.append(body)
        self.send_response(204)
        self.end_headers()

    def do_GET(self):
        with lock:
            data = "".join(h + "\n" for h in heads).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/jsonl")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
