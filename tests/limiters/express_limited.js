// express-rate-limit as its users start it: `app.use(rateLimit({ windowMs,
// limit }))` in front of every route (robots.txt too), the rest on its
// defaults (fixed window in memory, X-RateLimit-* headers, 429 with
// Retry-After). Each request is logged as nginx logs it
// (`- "GET /path HTTP/1.1" 200`).
//
//     node tests/limiters/express_limited.js PORT LOG LIMIT WINDOW_MS
const fs = require("node:fs");
const express = require("express");
const { rateLimit } = require("express-rate-limit");

const [port, log, limit, windowMs] = process.argv.slice(2);
const app = express();
app.use((req, res, next) => {
  res.on("finish", () => fs.appendFileSync(log, `- "${req.method} ${req.path} HTTP/1.1" ${res.statusCode}\n`));
  next();
});
app.use(rateLimit({ windowMs: Number(windowMs), limit: Number(limit) }));
app.get("/robots.txt", (req, res) => res.type("text/plain").send("User-agent: *\nAllow: /\n"));
app.get("/page/:n", (req, res) => res.type("text/plain").send(`page ${req.params.n}\n`));
app.listen(Number(port), "127.0.0.1");
