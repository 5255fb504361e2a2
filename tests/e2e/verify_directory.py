"""Checks a served Web Bot Auth key directory as a verifier written to
draft-ietf-webbotauth-httpsig-protocol-01 does, with code that is not
mannerly's: the `http-message-signatures` package (RFC 9421) for the
response signature and its Content-Digest, `cryptography` for the keys.

Reads JSON on stdin:
  {"url": "https://host/.well-known/http-message-signatures-directory",
   "status": 200, "headers": [["name", "value"], ...], "body": "..."}
and prints {"ok": true, "keyids": [signing keyids], "kids": [...],
"params": {...}} or {"ok": false, "error": "..."}.

The -01 rules checked (Key Distribution and Discovery, Directory Format,
Appendix B): status 200; media type
application/http-message-signatures-directory+json at the well-known URI;
a JWK Set whose kid values are the RFC 7638 thumbprints (computed here);
one signature per key the directory lists (Appendix B: "Each key SHOULD
be used to provide one signature"; checked here as a must), each tagged
http-message-signatures-directory, covering "@authority";req and
content-digest, with created (not in the future), expires and keyid, made
by a key the directory itself lists; Content-Digest matching the body.
"""

import json
import sys
import time

from http_message_signatures import HTTPMessageVerifier, MappingKeyResolver, algorithms

# The same directory reading as the request verifier beside this file.
from verify_web_bot_auth import Headers, load_keys

MEDIA_TYPE = "application/http-message-signatures-directory+json"
WELL_KNOWN = "/.well-known/http-message-signatures-directory"


class Request:
    def __init__(self, url):
        self.method = "GET"
        self.url = url
        host = url.split("://", 1)[1].split("/", 1)[0]
        self.headers = Headers([("Host", host), ("Accept", MEDIA_TYPE)])


class Response:
    def __init__(self, status, pairs, request):
        self.status_code = status
        self.headers = Headers(pairs)
        self.request = request


def check(doc):
    if doc["status"] != 200:
        raise ValueError(f"status {doc['status']}: discovery needs 200")
    resp = Response(doc["status"], doc["headers"], Request(doc["url"]))
    ctype = (resp.headers.get("content-type") or "").split(";")[0].strip()
    if doc["url"].endswith(WELL_KNOWN) and ctype != MEDIA_TYPE:
        raise ValueError(f"Content-Type {ctype!r}, not {MEDIA_TYPE}")
    body = doc["body"].encode("utf-8")
    jwks = json.loads(body)
    keys = load_keys(jwks)
    verifier = HTTPMessageVerifier(
        signature_algorithm=algorithms.ED25519,
        key_resolver=MappingKeyResolver(public_keys=keys, private_keys={}),
    )
    results = verifier.verify(
        resp,
        expect_tag="http-message-signatures-directory",
        require_components=('"@authority";req', "content-digest"),
        body=body,
    )
    now = time.time()
    signed_by = [r.parameters.get("keyid") for r in results]
    kids = [j["kid"] for j in jwks["keys"]]
    if sorted(signed_by) != sorted(kids):
        raise ValueError(f"signed by {signed_by}, but the directory lists {kids}")
    for r in results:
        p = r.parameters
        if "expires" not in p or "created" not in p or "keyid" not in p:
            raise ValueError(f"created, expires and keyid are required: {p}")
        if p["created"] > now + 60:
            raise ValueError(f"created {p['created']} is in the future")
    return {
        "ok": True,
        "keyids": [r.parameters["keyid"] for r in results],
        "kids": [j["kid"] for j in jwks["keys"]],
        "exp": [j.get("exp") for j in jwks["keys"]],
        "params": results[0].parameters,
    }


def main():
    doc = json.load(sys.stdin)
    try:
        out = check(doc)
    except Exception as e:  # every failure is a result, not a crash
        out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
