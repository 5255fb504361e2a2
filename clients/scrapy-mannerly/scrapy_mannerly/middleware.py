"""A downloader middleware that lets Scrapy plan around mannerly's budget.

mannerly holds a request until the host's turn; a held request keeps one of
Scrapy's download slots busy, and one paused host can fill them all
(scrapy#2638). This middleware asks mannerly not to hold
(``Prefer: wait=0``, RFC 7240), so a host whose turn is not now is answered
at once (503 or 429 with Retry-After), and puts that request back into the
engine after the delay. The slot is free meanwhile for the other hosts.
Nothing sleeps on the reactor: a timer hands the request back, and the
spider is kept open while requests wait for their turn.

The RateLimit fields mannerly writes on every answer (its ``"host"``
policy: a quota per window) set the host's download slot delay, so that
Scrapy sends at the pace the budget allows instead of finding it out by
refusals.

Settings:

* ``MANNERLY_PROXY``: the proxy URL, set on every request without a
  ``proxy`` of its own (leave empty when ``http_proxy`` is set).
* ``MANNERLY_WAIT`` (0): the ``Prefer: wait`` seconds sent.
* ``MANNERLY_MAX_RESCHEDULES`` (20): how often one request goes back to
  the engine before its answer is passed on as it is.
* ``MANNERLY_PACE`` (True): set the slot delay from the RateLimit fields.
"""

import logging
import math
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

from scrapy import signals
from scrapy.exceptions import DontCloseSpider, IgnoreRequest, NotConfigured

logger = logging.getLogger(__name__)

# The member of mannerly's own policy in the RateLimit fields.
POLICY_NAME = "host"
# mannerly's answers, forwarded or its own, carry this header; an answer
# without it did not pass through mannerly.
DECISION = b"Mannerly-Decision"


def retry_after_secs(value, now=None):
    """Seconds of a Retry-After: delay-seconds (what mannerly writes) or an
    HTTP-date (an origin's 429 passed on may carry one), or None."""
    if not value:
        return None
    text = value.decode("latin-1").strip()
    if text.isdigit():
        return int(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when is None or when.tzinfo is None:
        return None
    now = now or datetime.now(timezone.utc)
    return max(0, math.ceil((when - now).total_seconds()))


def _member(values, name):
    """The parameters of the list member `name` of structured list fields."""
    for value in values:
        for item in value.decode("latin-1").split(","):
            parts = [p.strip() for p in item.split(";")]
            if parts[0] != f'"{name}"':
                continue
            params = {}
            for p in parts[1:]:
                key, _, val = p.partition("=")
                params[key] = val
            return params
    return None


def policy_delay(values, name=POLICY_NAME):
    """Seconds between requests the RateLimit-Policy member `name` allows
    (`w` / `q`), or None."""
    params = _member(values, name)
    if not params:
        return None
    try:
        quota, window = int(params["q"]), int(params["w"])
    except (KeyError, ValueError):
        return None
    if quota <= 0 or window <= 0:
        return None
    return window / quota


class MannerlyMiddleware:
    """Sends ``Prefer: wait=0``, reschedules mannerly's "not now" answers
    after their Retry-After without holding a slot, and paces each host's
    slot at the quota mannerly's RateLimit fields state."""

    def __init__(self, crawler):
        settings = crawler.settings
        if not settings.getbool("MANNERLY_ENABLED", True):
            raise NotConfigured
        self.crawler = crawler
        self.proxy = settings.get("MANNERLY_PROXY", "")
        self.wait = settings.getint("MANNERLY_WAIT", 0)
        self.max_reschedules = settings.getint("MANNERLY_MAX_RESCHEDULES", 20)
        self.pace = settings.getbool("MANNERLY_PACE", True)
        # Requests handed to a timer and not back in the engine yet.
        self.waiting = 0
        self.stats = crawler.stats
        crawler.signals.connect(self.spider_idle, signal=signals.spider_idle)

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def process_request(self, request, spider=None):
        if self.proxy and "proxy" not in request.meta:
            request.meta["proxy"] = self.proxy
        request.headers.setdefault(b"Prefer", f"wait={self.wait}".encode())
        return None

    def process_response(self, request, response, spider=None):
        if DECISION not in response.headers:
            return response
        if self.pace:
            self._pace(request, response)
        if response.status not in (429, 503):
            return response
        delay = retry_after_secs(response.headers.get(b"Retry-After"))
        decision = response.headers.get(DECISION, b"").decode("latin-1")
        if delay is not None and decision.startswith("paced"):
            # Retry-After counts whole seconds; a turn refused for the pace
            # alone is at most one interval away, often well under a second.
            interval = policy_delay(response.headers.getlist(b"RateLimit-Policy"))
            if interval is not None:
                delay = min(delay, interval)
        done = request.meta.get("mannerly_reschedules", 0)
        if delay is None or done >= self.max_reschedules:
            return response
        again = request.replace(dont_filter=True)
        again.meta["mannerly_reschedules"] = done + 1
        # Already counted by a retry middleware of ours, not Scrapy's.
        again.meta.pop("retry_times", None)
        self._later(again, delay)
        self.stats.inc_value("mannerly/rescheduled")
        self.stats.inc_value(f"mannerly/rescheduled/{response.status}")
        logger.debug(
            "mannerly: %s not now (%s), again in %s s", request.url, decision, delay
        )
        raise IgnoreRequest(f"rescheduled in {delay} s by mannerly: {decision}")

    def _later(self, request, delay):
        from twisted.internet import reactor

        self.waiting += 1
        reactor.callLater(delay, self._back, request)

    def _back(self, request):
        self.waiting -= 1
        self.crawler.engine.crawl(request)

    def spider_idle(self, spider=None):
        # Requests on a timer are not in the scheduler: without this the
        # engine would close the spider before their turn.
        if self.waiting > 0:
            raise DontCloseSpider

    def _pace(self, request, response):
        delay = policy_delay(response.headers.getlist(b"RateLimit-Policy"))
        if delay is None:
            return
        downloader = self.crawler.engine.downloader
        slot = downloader.slots.get(downloader.get_slot_key(request))
        if slot is not None and slot.delay != delay:
            slot.delay = delay
            # A randomised delay (0.5 to 1.5 times) sends half the requests
            # before the budget's turn: each would come back "not now".
            slot.randomize_delay = False
            self.stats.set_value("mannerly/slot_delay_set", delay)
