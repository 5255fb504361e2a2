// Verifies Web Bot Auth signatures with Cloudflare's own npm verifier,
// `web-bot-auth` (on `http-message-sig`), under the package's reading: a
// covered header component is the whole field value, whatever its
// parameters (that is how Cloudflare's library reads `signature-agent`).
//
// Run with NODE_PATH pointing at the node_modules that holds the package.
// Reads JSON on stdin:
//   {"directory": <JWKS as served>, "agent": "https://origin",
//    "requests": [{"method": "GET", "url": "http://host:port/path",
//                  "headers": [["name", "value"], ...]}, ...]}
// and prints a JSON list, one entry per request:
//   {"ok": true, "keyid": "...", "params": {...}} or {"ok": false, "error": "..."}.
//
// Signature-Agent is checked as draft-meunier-http-message-signatures-
// directory-03 has it (Cloudflare's production verifier): one String item,
// the origin whose /.well-known/http-message-signatures-directory lists the
// key; "agent" is that origin.

const { verify, jwkToKeyID } = require("web-bot-auth");
const { verifierFromJWK } = require("web-bot-auth/crypto");
const { parseItem } = require("structured-headers");

async function main() {
  let input = "";
  for await (const chunk of process.stdin) input += chunk;
  const doc = JSON.parse(input);
  const keys = new Map();
  for (const jwk of doc.directory.keys) {
    // The kid is recomputed by the package's own thumbprint code.
    const kid = await jwkToKeyID(
      jwk,
      (data) => crypto.subtle.digest("SHA-256", data),
      (buf) => Buffer.from(buf).toString("base64url")
    );
    if (jwk.kid !== undefined && jwk.kid !== kid) {
      console.error(`kid ${jwk.kid} is not the thumbprint ${kid}`);
      process.exit(3);
    }
    keys.set(kid, jwk);
  }
  const out = [];
  for (const r of doc.requests) {
    try {
      const headers = {};
      for (const [k, v] of r.headers) {
        const name = k.toLowerCase();
        headers[name] = name in headers ? `${headers[name]}, ${v}` : v;
      }
      const message = { method: r.method, url: r.url, headers };
      let seen;
      await verify(message, async (data, signature, params) => {
        const jwk = keys.get(params.keyid);
        if (!jwk) throw new Error(`no key ${params.keyid} in the directory`);
        await (await verifierFromJWK(jwk))(data, signature, params);
        seen = params;
      });
      const [agent, agentParams] = parseItem(headers["signature-agent"] ?? "");
      if (typeof agent !== "string" || agentParams.size !== 0) {
        throw new Error(`directory-03: Signature-Agent must be one String: ${headers["signature-agent"]}`);
      }
      if (agent !== doc.agent) throw new Error(`unexpected Signature-Agent ${agent}`);
      const input = headers["signature-input"];
      out.push({
        ok: true,
        keyid: seen.keyid,
        params: {
          tag: seen.tag,
          created: Math.floor(seen.created.getTime() / 1000),
          expires: Math.floor(seen.expires.getTime() / 1000),
          nonce: seen.nonce ?? null,
        },
        covers: input.slice(input.indexOf("(") + 1, input.indexOf(")")),
      });
    } catch (e) {
      out.push({ ok: false, error: String(e && e.message ? e.message : e) });
    }
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
