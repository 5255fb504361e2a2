"""Flask-Limiter as its users start it: `Limiter(get_remote_address, app=app,
application_limits=[...], strategy=..., storage_uri="memory://")`: one
limit over every route of the application (robots.txt too; `default_limits`
would give each route its own count), headers off (the default: a 429
carries no Retry-After). Each request is logged as
nginx logs it (`- "GET /path HTTP/1.1" 200`).

    python3 tests/limiters/flask_limited.py PORT LOG "2 per second" fixed-window
"""
import sys

from flask import Flask, request
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address

port, log, limit, strategy = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
app = Flask(__name__)
Limiter(
    get_remote_address,
    app=app,
    application_limits=[limit],
    strategy=strategy,
    storage_uri="memory://",
)


@app.route("/robots.txt")
def robots():
    return "User-agent: *\nAllow: /\n", 200, {"Content-Type": "text/plain"}


@app.route("/page/<int:n>")
def page(n):
    return f"page {n}\n", 200, {"Content-Type": "text/plain"}


@app.after_request
def record(response):
    with open(log, "a") as f:
        f.write(f'- "{request.method} {request.path} HTTP/1.1" {response.status_code}\n')
    return response


if __name__ == "__main__":
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app.run(host="127.0.0.1", port=port, threaded=True)
