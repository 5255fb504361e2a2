// Runs the public HTTP cache test suite (http-cache-tests, the suite of
// cache-tests.fyi) through a forward proxy: the suite's own origin on
// 127.0.0.1 (its handlers, on a loopback listener of ours: its server.mjs
// listens on every interface), its client sending every request through
// the proxy in absolute form with undici's ProxyAgent.
//
// env: CACHE_TESTS = the package's directory, PROXY = http://host:port.
// RESULTS = the file to write one JSON object to: test id -> { kind, result }, result one of
// pass, fail, setup (the harness could not set the test up) and dependency
// (a test it depends on did not pass), as cache-tests.fyi counts them.
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'

const root = process.env.CACHE_TESTS
// undici is installed beside the suite, not beside this script.
const { ProxyAgent, fetch } = createRequire(path.join(root, 'package.json'))('undici')
const load = (file) => import(pathToFileURL(path.join(root, file)).href)
const [config, state, test, files, runner, suites] = await Promise.all([
  load('server/handle-config.mjs'),
  load('server/handle-state.mjs'),
  load('server/handle-test.mjs'),
  load('server/handle-file.mjs'),
  load('client/runner.mjs'),
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
  const viaProxy = (url, init) => fetch(url, { ...init, dispatcher: agent })
  await runner.runTests(suites.default, viaProxy, false, base)
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
// out, as published results that include it are counted without it.
for (const id of Object.keys(results).filter((id) => byId.has(id)).sort()) {
  out[id] = { kind: byId.get(id).kind || 'required', result: verdict(id) }
  if (Array.isArray(results[id])) out[id].why = results[id].join(': ')
}
// The suite's handlers print warnings on stdout: the results go to a file.
fs.writeFileSync(process.env.RESULTS, JSON.stringify(out, null, 1))
process.exit(0)
