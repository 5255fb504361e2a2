"""Verifies Web Bot Auth signatures with an implementation other than the
one that signed: the `http-message-signatures` package (RFC 9421).

Reads JSON on stdin:
  {"directory": <JWKS as served>, "agent": "https://...",
   "requests": [{"method": "GET", "url": "http://host:port/path",
                 "headers": [["name", "value"], ...]}, ...]}
and prints a JSON list, one entry per request:
  {"ok": true, "keyid": "..."} or {"ok": false, "error": "..."}.

Signature-Agent is checked by the rules of
draft-ietf-webbotauth-httpsig-protocol-01: a Dictionary whose member for the
signature's label is a String holding an absolute https URL (the JWK Set
itself, fetched as is) and carries no parameters; "agent" is that URL.

The directory's kid values are checked against thumbprints computed here
(RFC 7638 / RFC 8037), independently of mannerly; a mismatch is an error
for the whole run (exit 3).
"""

import base64
import hashlib
import json
import sys

import http_sf
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

    def get(self, name):
        return next((v for k, v in self.pairs if k.lower() == name.lower()), None)


class Message:
    def __init__(self, method, url, pairs):
        self.method = method
        self.url = url
        self.headers = Headers(pairs)


def load_keys(jwks):
    """The Ed25519 keys of a JWK Set by thumbprint; ValueError when a key is
    not Ed25519 or its kid is not its thumbprint."""
    keys = {}
    for jwk in jwks["keys"]:
        if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
            raise ValueError(f"directory holds a key that is not Ed25519: {jwk}")
        tp = thumbprint(jwk)
        if jwk.get("kid") != tp:
            raise ValueError(f"kid {jwk.get('kid')} is not the thumbprint {tp}")
        raw = base64.urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4))
        keys[tp] = Ed25519PublicKey.from_public_bytes(raw)
    return keys


def main():
    doc = json.load(sys.stdin)
    try:
        keys = load_keys(doc["directory"])
    except ValueError as e:
        print(e, file=sys.stderr)
        sys.exit(3)
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
            if len(agent) != 1:
                raise ValueError(f"one Signature-Agent field expected: {agent}")
            members = http_sf.parse(agent[0].encode("ascii"), tltype="dictionary")
            value, params = members["sig1"]
            if params:
                raise ValueError(f"-01: a member carrying parameters is ignored: {params}")
            if not isinstance(value, str) or not value.startswith("https://"):
                raise ValueError(f"-01: the member must be an https URL String: {value!r}")
            if value != doc["agent"]:
                raise ValueError(f"unexpected Signature-Agent {value}")
            out.append({"ok": True, "keyid": res.parameters.get("keyid"), "params": res.parameters})
        except Exception as e:  # every failure is a result, not a crash
            out.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
