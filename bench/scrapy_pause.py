"""Scrapy through mannerly over many hosts, one of them paused by a 429
with Retry-After (scrapy#2638: one waiting domain fills the slots). Run by
bench/scrapy_pause.sh and by tests/e2e/told.rs.

    python3 bench/scrapy_pause.py origin PORT LOG PAUSED RETRY_AFTER
    scrapy runspider bench/scrapy_pause.py -a hosts=a.test:1,b.test:1 \
        -a pages=30 [-a paused=a.test] [-a middleware=0]

The origin answers every host name it is reached by. The paused host's
first page gets 429 + Retry-After, and so does every request of that host
that comes before the Retry-After is over (an early one is an extra 429 in
its log). The spider prints one `scrapy: {json}` line: pages per host and,
for the hosts other than the paused one, their pages per second from the
crawl's start to their last page.
"""
import json
import sys
import threading
import time

import scrapy


class Spider(scrapy.Spider):
    name = "pause"
    custom_settings = {
        "CONCURRENT_REQUESTS": 16,
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
    }

    @classmethod
    def update_settings(cls, settings):
        super().update_settings(settings)
        # -s MANNERLY_ON=0 runs the same crawl without the middleware.
        if settings.getbool("MANNERLY_ON", True):
            settings.set(
                "DOWNLOADER_MIDDLEWARES",
                {"scrapy_mannerly.MannerlyMiddleware": 600},
                priority="spider",
            )

    def __init__(self, hosts="", pages="30", paused="", **kw):
        super().__init__(**kw)
        self.hosts = [h for h in hosts.split(",") if h]
        self.pages, self.paused = int(pages), paused
        self.got = {h.split(":")[0]: 0 for h in self.hosts}
        self.last = {}
        self.first = None

    async def start(self):
        self.first = time.monotonic()
        # Round robin, so that every host has requests in the scheduler.
        for i in range(self.pages):
            for h in self.hosts:
                yield scrapy.Request(f"http://{h}/page/{i}", dont_filter=True)

    def parse(self, response):
        if response.status == 200:
            host = response.url.split("/")[2].split(":")[0]
            self.got[host] += 1
            self.last[host] = time.monotonic()

    def closed(self, reason):
        others = [h for h in self.got if h != self.paused]
        pages = sum(self.got[h] for h in others)
        end = max((self.last[h] for h in others if h in self.last), default=self.first)
        span = end - self.first
        stats = self.crawler.stats
        out = {
            "pages": self.got,
            "others_pages": pages,
            "others_span_s": round(span, 3),
            "others_pages_per_s": round(pages / span, 2) if span > 0 else 0.0,
            "total_s": round(time.monotonic() - self.first, 3),
            "rescheduled": stats.get_value("mannerly/rescheduled", 0),
            "retried": stats.get_value("retry/count", 0),
            "gave_up": stats.get_value("retry/max_reached", 0),
        }
        print("scrapy: " + json.dumps(out), flush=True)


def origin(port, log, paused, retry_after):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    lock = threading.Lock()
    until = [None]

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            host = self.headers.get("Host", "").split(":")[0]
            now = time.monotonic()
            status = 200
            if host == paused and self.path != "/robots.txt":
                with lock:
                    if until[0] is None:
                        until[0] = now + retry_after
                    if now < until[0]:
                        status = 429
            elif self.path == "/robots.txt":
                status = 404
            with open(log, "a") as f:
                f.write(f"{now:.3f} {host} {self.path} {status}\n")
            body = b"page\n" if status == 200 else b"not here\n"
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", str(retry_after))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()


if __name__ == "__main__" and sys.argv[1:2] == ["origin"]:
    origin(int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]))
