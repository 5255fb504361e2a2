"""Verifies Web Bot Auth signatures with an implementation other than the
one that signed: the `http-message-signatures` package (RFC 9421).

Reads JSON on stdin:
  {"directory": <JWKS as served>, "agent": "https://...",
   "requests": [{"method": "GET", "url": "http://host:port/path",
                 "headers": [["name", "value"], ...]}, ...]}
and prints a JSON list, one entry per request:
  {"ok": true, "keyid": "..."} or {"ok": false, "error": "..."}.

The directory's kid values are checked against thumbprints computed here
(RFC 7638 / RFC 8037), independently of mannerly; a mismatch is an error
for the whole run (exit 3).
"""

import base64
import hashlib
import json
import sys

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from http_message_signatures import HTTPMessageVerifier, MappingKeyResolver, algorithms


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def thumbprint(jwk) -> str:
    canonical = json.dumps(
        {"crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"]},
        separators=(",", ":"),
        sort_keys=True,
    )
    return b64url(hashlib.sha256(canonical.encode("ascii")).digest())


class Headers:
    def __init__(self, pairs):
        self.pairs = [(k, v) for k, v in pairs]

    def items(self):
        return list(self.pairs)


class Message:
    def __init__(self, method, url, pairs):
        self.method = method
        self.url = url
        self.headers = Headers(pairs)


def main():
    doc = json.load(sys.stdin)
    keys = {}
    for jwk in doc["directory"]["keys"]:
        if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
            print(f"directory holds a key that is not Ed25519: {jwk}", file=sys.stderr)
            sys.exit(3)
        tp = thumbprint(jwk)
        if jwk.get("kid") != tp:
            print(f"kid {jwk.get('kid')} is not the thumbprint {tp}", file=sys.stderr)
            sys.exit(3)
        raw = base64.urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4))
        keys[tp] = Ed25519PublicKey.from_public_bytes(raw)
    verifier = HTTPMessageVerifier(
        signature_algorithm=algorithms.ED25519,
        key_resolver=MappingKeyResolver(public_keys=keys, private_keys={}),
    )
    out = []
    for r in doc["requests"]:
        msg = Message(r["method"], r["url"], r["headers"])
        try:
            results = verifier.verify(
                msg,
                expect_tag="web-bot-auth",
                require_components=("@authority", '"signature-agent";key="sig1"'),
            )
            (res,) = results
            agent = [v for k, v in r["headers"] if k.lower() == "signature-agent"]
            if agent != [f'sig1="{doc["agent"]}"']:
                raise ValueError(f"unexpected Signature-Agent {agent}")
            out.append({"ok": True, "keyid": res.parameters.get("keyid"), "params": res.parameters})
        except Exception as e:  # every failure is a result, not a crash
            out.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
