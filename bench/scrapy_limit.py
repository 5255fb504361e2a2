"""Scrapy 2.19 as users run it (runspider, ROBOTSTXT_OBEY, default retries)
against the seed's origin: 2 requests per sliding second, every path counted
(robots.txt too), 429 with Retry-After: 2. Run by bench/scrapy.sh.

    python3 bench/scrapy_limit.py origin PORT LOG   # the origin
    scrapy runspider bench/scrapy_limit.py -a base=URL -a pages=60
"""
import sys
import threading
import time
from collections import deque

import scrapy


class Spider(scrapy.Spider):
    name = "limit"
    custom_settings = {"ROBOTSTXT_OBEY": True, "LOG_LEVEL": "WARNING"}

    def __init__(self, base="", pages="60", **kw):
        super().__init__(**kw)
        self.base, self.pages = base, int(pages)
        self.got, self.first, self.last = 0, None, None

    async def start(self):
        self.first = time.monotonic()
        for i in range(self.pages):
            yield scrapy.Request(f"{self.base}/page/{i}", dont_filter=True)

    def parse(self, response):
        if response.status == 200:
            self.got += 1
            self.last = time.monotonic()

    def closed(self, reason):
        span = (self.last or self.first) - self.first
        rate = self.got / span if span > 0 else 0.0
        print(f"scrapy: {self.got}/{self.pages} pages, {rate:.2f} pages/s", flush=True)


def origin(port, log):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    served, lock = deque(), threading.Lock()

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            now = time.monotonic()
            with lock:
                while served and now - served[0] >= 1.0:
                    served.popleft()
                ok = len(served) < 2
                if ok:
                    served.append(now)
            with open(log, "a") as f:
                f.write(f"{self.path} {200 if ok else 429}\n")
            body = (b"User-agent: *\nAllow: /\n" if self.path == "/robots.txt" else b"page\n") if ok else b"slow down\n"
            self.send_response(200 if ok else 429)
            if not ok:
                self.send_header("Retry-After", "2")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()


if __name__ == "__main__" and sys.argv[1:2] == ["origin"]:
    origin(int(sys.argv[2]), sys.argv[3])
