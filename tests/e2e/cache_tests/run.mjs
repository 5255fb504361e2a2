// Runs the public HTTP cache test suite (http-cache-tests, the suite of
// cache-tests.fyi) through a forward proxy: the suite's own origin on
// 127.0.0.1 (its handlers, on a loopback listener of ours: its server.mjs
// listens on every interface), its client sending every request through
// the proxy in absolute form with undici's ProxyAgent.
//
// env: CACHE_TESTS = the package's directory (npm) or a checkout of
// github.com/http-tests/cache-tests (git), PROXY = http://host:port.
// RESULTS = the file to write one JSON object to: test id -> { kind, result }, result one of
// pass, fail, setup (the harness could not set the test up) and dependency
// (a test it depends on did not pass), as cache-tests.fyi counts them.
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'

const root = process.env.CACHE_TESTS
// Two layouts: the npm package (server/, client/; its client takes the
// fetch function) and the git repository since 2025 (test-engine/; its
// client calls the global fetch, and builds an undici Agent of its own for
// the requests whose 1xx it collects).
const git = fs.existsSync(path.join(root, 'test-engine'))
const engine = git ? 'test-engine/' : ''
// undici is installed beside the suite, not beside this script.
const undici = createRequire(path.join(root, 'package.json'))('undici')
const { ProxyAgent, fetch } = undici
if (git) {
  // The suite's own Agent would go to the origin directly, past the proxy:
  // every Agent it makes goes through the proxy instead. Set before the
  // suite first imports undici, so its import sees this one.
  undici.Agent = class ThroughProxy extends ProxyAgent {
    constructor (opts) {
      super({ ...opts, uri: process.env.PROXY, proxyTunnel: false })
    }
  }
}
const load = (file) => import(pathToFileURL(path.join(root, file)).href)
const [config, state, test, files, runner, suites] = await Promise.all([
  load(engine + 'server/handle-config.mjs'),
  load(engine + 'server/handle-state.mjs'),
  load(engine + 'server/handle-test.mjs'),
  load(engine + 'server/handle-file.mjs'),
  load(engine + 'client/runner.mjs'),
  load('tests/index.mjs')
])

// SCORE = a published results file of the package (results/squid.json):
// counted the same way instead of running, to compare like with like.
const results = process.env.SCORE
  ? JSON.parse(fs.readFileSync(process.env.SCORE, 'utf8'))
  : await run()

async function run () {
  const server = http.createServer((request, response) => {
    const url = new URL(request.url, base)
    const segs = url.pathname.split('/')
    segs.shift()
    const handlers = { config: config.default, state: state.default, test: test.default }
    const dispatch = handlers[segs.shift()]
    if (dispatch) dispatch(segs, request, response)
    else files.default(url, request, response)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const base = `http://127.0.0.1:${server.address().port}`
  const agent = new ProxyAgent({ uri: process.env.PROXY, proxyTunnel: false })
  const viaProxy = (url, init) => fetch(url, { dispatcher: agent, ...init })
  if (git) {
    globalThis.fetch = viaProxy
    await runner.runTests(suites.default, false, base)
  } else {
    await runner.runTests(suites.default, viaProxy, false, base)
  }
  server.close()
  await agent.close()
  return runner.getResults()
}

const byId = new Map()
for (const suite of suites.default) for (const t of suite.tests) byId.set(t.id, t)
function verdict (id) {
  const t = byId.get(id)
  const r = results[id]
  if (r === undefined) return 'untested'
  for (const dep of t.depends_on || []) {
    if (verdict(dep) !== 'pass') return 'dependency'
  }
  if (r === true) return 'pass'
  if (Array.isArray(r) && r[0] === 'Setup') return 'setup'
  return 'fail'
}
const out = {}
// Only the suites of tests/index.mjs: Surrogate-Control (CDN-only) is left
// out, as published results that include it are counted without it; so
// are the CDN-only tests (CDN-Cache-Control) of the git layout.
const counted = (id) => byId.has(id) && !byId.get(id).cdn_only
for (const id of Object.keys(results).filter(counted).sort()) {
  out[id] = { kind: byId.get(id).kind || 'required', result: verdict(id) }
  if (Array.isArray(results[id])) out[id].why = results[id].join(': ')
}
// The suite's handlers print warnings on stdout: the results go to a file.
fs.writeFileSync(process.env.RESULTS, JSON.stringify(out, null, 1))
process.exit(0)
