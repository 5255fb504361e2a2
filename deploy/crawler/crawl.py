"""An example crawler: plain Python (urllib), configured only by the
environment, as an existing scraper would be.

urllib reads http_proxy/https_proxy (and the uppercase spellings);
OpenSSL reads SSL_CERT_FILE, so HTTPS through mannerly verifies against
mannerly's CA. Each answer is printed with its Mannerly-Decision.
"""

import os
import sys
import time
import urllib.error
import urllib.request

URLS = os.environ.get("START_URLS", "https://example.org/").split()
ROUNDS = int(os.environ.get("ROUNDS", "3"))
AGENT = os.environ.get("CRAWLER_AGENT", "ExampleBot/1.0 (+https://example.org/bot)")


def fetch(url):
    req = urllib.request.Request(url, headers={"User-Agent": AGENT})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            body = resp.read()
            return resp.status, resp.headers.get("Mannerly-Decision", "-"), len(body)
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Mannerly-Decision", "-"), 0


def main():
    for round_no in range(ROUNDS):
        for url in URLS:
            try:
                status, decision, size = fetch(url)
                print(f"round {round_no} {status} {url} bytes={size} decision={decision}", flush=True)
            except OSError as err:
                print(f"round {round_no} error {url}: {err}", file=sys.stderr, flush=True)
        time.sleep(1)
    # Stay up so `docker compose logs` and the Kubernetes example keep the pod.
    while os.environ.get("STAY", "1") == "1":
        time.sleep(3600)


if __name__ == "__main__":
    main()
