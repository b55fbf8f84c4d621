// MCP's TypeScript SDK, unchanged, against /mcp on hutch serve, over
// streamable HTTP. Run by TestMCPServeSDK (cmd/hutch/mcp_serve_linux_test.go),
// which starts the daemon on a loopback TCP port and sets:
//   HUTCH_MCP_URL          http://127.0.0.1:PORT/mcp
//   HUTCH_MCP_TOKEN        a token of tenant A
//   HUTCH_MCP_TOKEN_B      a token of tenant B
//   HUTCH_MCP_TOKEN_E2B    an E2B-shaped token of tenant A
import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import { randomBytes, createHash } from 'node:crypto'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import Ajv2020 from 'ajv/dist/2020.js'

for (const v of ['HUTCH_MCP_URL', 'HUTCH_MCP_TOKEN', 'HUTCH_MCP_TOKEN_B', 'HUTCH_MCP_TOKEN_E2B']) {
  if (!process.env[v]) throw new Error(`${v} is not set`)
}
const url = new URL(process.env.HUTCH_MCP_URL)
const statelessURL = new URL(url.href + '/stateless')
const tokenA = process.env.HUTCH_MCP_TOKEN
const tokenB = process.env.HUTCH_MCP_TOKEN_B

// The tools and the arguments clients and docs rely on (issue contract).
const contract = {
  sandbox_create: ['image', 'timeout_s', 'allow_domains'],
  sandbox_list: [],
  sandbox_info: ['sandbox_id'],
  sandbox_kill: ['sandbox_id'],
  exec: ['command', 'cwd', 'env', 'timeout_s', 'yield_ms', 'pty', 'sandbox_id'],
  exec_poll: ['session_id', 'stdin'],
  exec_kill: ['session_id'],
  file_read: ['path', 'offset', 'limit', 'sandbox_id'],
  file_write: ['path', 'content', 'encoding', 'sandbox_id'],
  file_edit: ['path', 'old_string', 'new_string', 'replace_all', 'sandbox_id'],
  file_list: ['path', 'depth', 'sandbox_id'],
  port_url: ['sandbox_id']
}

const clients = []
async function connect (token, target = url) {
  const client = new Client({ name: 'hutch-test', version: '1.0.0' })
  const transport = new StreamableHTTPClientTransport(target, {
    requestInit: { headers: { Authorization: `Bearer ${token}` } }
  })
  await client.connect(transport)
  clients.push(client)
  return { client, transport }
}
after(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => {})))
})

// call calls a tool and fails on a tool error; it returns the result.
async function call (client, name, args, opts = {}) {
  const res = await client.callTool({ name, arguments: args }, undefined, { timeout: 300_000, ...opts })
  assert.ok(!res.isError, `${name} ${JSON.stringify(args).slice(0, 200)}: tool error: ${textOf(res)}`)
  return res
}

// refused calls a tool that must answer with a tool error (never a
// broken connection); it returns the error's text.
async function refused (client, name, args) {
  const res = await client.callTool({ name, arguments: args }, undefined, { timeout: 300_000 })
  assert.equal(res.isError, true, `${name} ${JSON.stringify(args)} succeeded: ${JSON.stringify(res).slice(0, 500)}`)
  return textOf(res)
}

const textOf = (res) => (res.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('\n')

// until polls f until it returns something truthy, failing with what
// after ms.
async function until (f, what, ms = 60_000) {
  const end = Date.now() + ms
  for (;;) {
    const v = await f()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

// sh runs a shell command to its end in sandbox id and returns its
// output.
async function sh (client, id, command) {
  const res = await call(client, 'exec', { sandbox_id: id, command, yield_ms: 120_000 })
  assert.equal(res.structuredContent.exit_code, 0, `${command}: ${JSON.stringify(res.structuredContent)}`)
  return res.structuredContent.output
}

// gone reports whether the process whose pid is in file is gone.
async function gone (client, id, file) {
  const out = await sh(client, id, `kill -0 "$(cat ${file})" 2>/dev/null && echo alive || echo gone`)
  return out.trim() === 'gone'
}

let a, b, tools, sandbox

before(async () => {
  a = await connect(tokenA)
  b = await connect(tokenB)
  tools = (await a.client.listTools()).tools
})

describe('session', () => {
  test('initialize: hutch, with tools', async () => {
    const info = a.client.getServerVersion()
    assert.equal(info.name, 'hutch')
    assert.ok(a.client.getServerCapabilities().tools, 'no tools capability')
    assert.ok(a.transport.sessionId, 'no session id')
  })

  test('tools/list: the contract, valid JSON schemas, annotations', async () => {
    const ajv = new Ajv2020({ strict: false, validateSchema: true })
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]))
    for (const [name, args] of Object.entries(contract)) {
      const tool = byName[name]
      assert.ok(tool, `no tool ${name} among ${Object.keys(byName)}`)
      assert.ok(tool.description && tool.description.length > 20, `${name}: no description`)
      assert.equal(tool.inputSchema.type, 'object', `${name}: inputSchema is not an object schema`)
      for (const arg of args) assert.ok(arg in (tool.inputSchema.properties || {}), `${name}: no argument ${arg}`)
      for (const s of [tool.inputSchema, tool.outputSchema].filter(Boolean)) {
        ajv.compile(s) // throws on a schema that is not valid JSON Schema
      }
      assert.ok(tool.annotations && typeof tool.annotations.readOnlyHint === 'boolean', `${name}: no readOnlyHint`)
    }
    assert.equal(byName.sandbox_list.annotations.readOnlyHint, true)
    assert.equal(byName.sandbox_kill.annotations.destructiveHint, true)
  })

  test('a ping, then the session ends with DELETE', async () => {
    const c = await connect(tokenA)
    await c.client.ping()
    const id = c.transport.sessionId
    await c.transport.terminateSession()
    const res = await post(tokenA, { jsonrpc: '2.0', id: 9, method: 'ping' }, { 'Mcp-Session-Id': id, 'MCP-Protocol-Version': '2025-11-25' })
    assert.equal(res.status, 404, `a ping in a deleted session: ${res.status}`)
  })

  test('no token, a wrong one: 401 with WWW-Authenticate; an E2B-shaped token works', async () => {
    for (const headers of [{}, { Authorization: 'Bearer hutch_not-a-token' }]) {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' })
      })
      assert.equal(res.status, 401)
      assert.match(res.headers.get('www-authenticate') || '', /^Bearer /)
      const body = await res.json()
      assert.equal(body.code, 'unauthorized')
    }
    const e2b = await connect(process.env.HUTCH_MCP_TOKEN_E2B)
    await e2b.client.listTools()
  })
})

// post sends one JSON-RPC message to /mcp with token and more headers.
async function post (token, msg, headers = {}, target = url) {
  return fetch(target, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      Authorization: `Bearer ${token}`,
      ...headers
    },
    body: JSON.stringify(msg)
  })
}

describe('tools', () => {
  before(async () => {
    const res = await call(a.client, 'sandbox_create', { timeout_s: 900 })
    sandbox = res.structuredContent.sandbox_id
    assert.match(sandbox, /^sb-/)
  })

  test('sandbox_list, sandbox_info', async () => {
    const list = await call(a.client, 'sandbox_list', {})
    assert.ok(JSON.stringify(list.structuredContent).includes(sandbox), `${sandbox} not listed: ${JSON.stringify(list.structuredContent)}`)
    const info = await call(a.client, 'sandbox_info', { sandbox_id: sandbox })
    assert.equal(info.structuredContent.sandbox_id, sandbox)
    assert.equal(info.structuredContent.state, 'running')
  })

  test('exec to its end: exit code and output', async () => {
    const res = await call(a.client, 'exec', { sandbox_id: sandbox, command: 'echo out; echo err >&2; exit 3' })
    assert.equal(res.structuredContent.exit_code, 3)
    assert.match(res.structuredContent.output, /out/)
    assert.match(res.structuredContent.output, /err/)
    assert.equal(res.structuredContent.session_id, undefined)
  })

  test('file_write, file_read, file_edit, file_list', async () => {
    await call(a.client, 'file_write', { sandbox_id: sandbox, path: '/tmp/t/a.txt', content: 'one\ntwo\nthree\n' })
    const read = await call(a.client, 'file_read', { sandbox_id: sandbox, path: '/tmp/t/a.txt' })
    assert.match(textOf(read), /two/)
    await call(a.client, 'file_edit', { sandbox_id: sandbox, path: '/tmp/t/a.txt', old_string: 'two', new_string: 'TWO' })
    assert.equal(await sh(a.client, sandbox, 'cat /tmp/t/a.txt'), 'one\nTWO\nthree\n')
    const msg = await refused(a.client, 'file_edit', { sandbox_id: sandbox, path: '/tmp/t/a.txt', old_string: 'nowhere', new_string: 'x' })
    assert.ok(msg.length > 0)
    const list = await call(a.client, 'file_list', { sandbox_id: sandbox, path: '/tmp/t' })
    assert.ok(JSON.stringify(list).includes('a.txt'))
  })

  test('a 10 MiB binary file, byte for byte: file_write in base64, file_read by its link', async () => {
    const data = randomBytes(10 << 20)
    const sum = createHash('sha256').update(data).digest('hex')
    await call(a.client, 'file_write', { sandbox_id: sandbox, path: '/tmp/big.bin', content: data.toString('base64'), encoding: 'base64' })
    assert.match(await sh(a.client, sandbox, 'sha256sum /tmp/big.bin'), new RegExp(`^${sum} `))
    const read = await call(a.client, 'file_read', { sandbox_id: sandbox, path: '/tmp/big.bin' })
    const link = (read.content || []).find((c) => c.type === 'resource_link')
    assert.ok(link, `file_read of a 10 MiB binary file gave no resource link: ${JSON.stringify(read).slice(0, 500)}`)
    assert.ok(link.uri.startsWith(`${url.href}/links/`), `link ${link.uri} is not under ${url.href}/links/`)
    const res = await fetch(link.uri) // no token: the URL is the capability
    assert.equal(res.status, 200)
    const got = Buffer.from(await res.arrayBuffer())
    assert.equal(got.length, data.length)
    assert.equal(createHash('sha256').update(got).digest('hex'), sum)
  })

  test('exec of a 10-minute command: a session id within its yield, polled, killed, its process gone', async () => {
    const res = await call(a.client, 'exec', { sandbox_id: sandbox, command: 'echo $$ > /tmp/long.pid; echo started; exec sleep 600', yield_ms: 1000 })
    const sid = res.structuredContent.session_id
    assert.ok(sid, `no session id: ${JSON.stringify(res.structuredContent)}`)
    assert.equal(res.structuredContent.running, true)
    assert.equal(res.structuredContent.exit_code, undefined)
    await until(async () => (await sh(a.client, sandbox, 'cat /tmp/long.pid 2>/dev/null || true')).trim() !== '', 'the pid file')
    const poll = await call(a.client, 'exec_poll', { session_id: sid })
    assert.equal(poll.structuredContent.exit_code, undefined, `the command ended: ${JSON.stringify(poll.structuredContent)}`)
    assert.ok(!(await gone(a.client, sandbox, '/tmp/long.pid')), 'the command is not running')
    // Through the stateless path too: the tenant's exec sessions are
    // the same there.
    const s = await connect(tokenA, statelessURL)
    const spoll = await call(s.client, 'exec_poll', { session_id: sid })
    assert.equal(spoll.structuredContent.exit_code, undefined)
    const killed = await call(a.client, 'exec_kill', { session_id: sid })
    assert.equal(killed.structuredContent.killed, true)
    await until(() => gone(a.client, sandbox, '/tmp/long.pid'), 'the killed command to be gone')
    await refused(a.client, 'exec_poll', { session_id: sid })
  })

  test('a cancelled exec kills its command', async () => {
    const ctl = new AbortController()
    const pending = a.client.callTool(
      { name: 'exec', arguments: { sandbox_id: sandbox, command: 'echo $$ > /tmp/cancel.pid; exec sleep 600', yield_ms: 300_000 } },
      undefined, { signal: ctl.signal, timeout: 400_000 })
    await until(async () => (await sh(a.client, sandbox, 'cat /tmp/cancel.pid 2>/dev/null || true')).trim() !== '', 'the pid file')
    ctl.abort()
    await assert.rejects(pending)
    await until(() => gone(a.client, sandbox, '/tmp/cancel.pid'), 'the cancelled command to be gone')
  })

  test("port_url: a URL on the daemon reaches a server inside the sandbox; B gets none for A's", async () => {
    await call(a.client, 'file_write', { sandbox_id: sandbox, path: '/tmp/www/index.html', content: 'served from inside\n' })
    const server = fs.existsSync('/usr/bin/python3')
      ? 'exec /usr/bin/python3 -m http.server --bind 127.0.0.1 8765'
      : 'exec /usr/bin/busybox httpd -f -p 127.0.0.1:8765'
    const r = await call(a.client, 'exec', { sandbox_id: sandbox, command: server, cwd: '/tmp/www', yield_ms: 100 })
    assert.equal(r.structuredContent.running, true, `the server did not start: ${r.structuredContent.output}`)
    const u = (await call(a.client, 'port_url', { sandbox_id: sandbox, port: 8765 })).structuredContent.url
    assert.match(u, /\/mcp\/ports\/[0-9a-f]{48}\/$/)
    let body = ''
    await until(async () => {
      try {
        const resp = await fetch(u + 'index.html')
        body = await resp.text()
        return resp.status === 200
      } catch {
        return false
      }
    }, 'the server to answer through the URL')
    assert.equal(body, 'served from inside\n')
    assert.equal((await call(a.client, 'port_url', { sandbox_id: sandbox, port: 8765 })).structuredContent.url, u, 'the same port, another URL')
    await refused(b.client, 'port_url', { sandbox_id: sandbox, port: 8765 })
    const wrong = await fetch(u.replace(/[0-9a-f]{48}/, '0'.repeat(48)) + 'index.html')
    assert.equal(wrong.status, 404, 'a made-up token reached a port')
    await call(a.client, 'exec_kill', { session_id: r.structuredContent.session_id })
  })

  test('errors come back as tool errors', async () => {
    await refused(a.client, 'exec', { command: 'true' }) // no sandbox_id
    await refused(a.client, 'sandbox_info', { sandbox_id: 'sb-nope' })
    await refused(a.client, 'exec_poll', { session_id: 'nope' })
    await a.client.ping() // the session lives on
  })
})

describe('tenant isolation', () => {
  test("tenant B neither sees nor uses A's sandbox, exec session or MCP session", async () => {
    const long = await call(a.client, 'exec', { sandbox_id: sandbox, command: 'exec sleep 600', yield_ms: 200 })
    const sid = long.structuredContent.session_id
    assert.ok(sid)

    const list = await call(b.client, 'sandbox_list', {})
    assert.ok(!JSON.stringify(list.structuredContent).includes(sandbox), "B lists A's sandbox")
    await refused(b.client, 'sandbox_info', { sandbox_id: sandbox })
    await refused(b.client, 'exec', { sandbox_id: sandbox, command: 'touch /tmp/b-was-here' })
    await refused(b.client, 'file_read', { sandbox_id: sandbox, path: '/tmp/t/a.txt' })
    await refused(b.client, 'file_write', { sandbox_id: sandbox, path: '/tmp/b', content: 'x' })
    await refused(b.client, 'exec_poll', { session_id: sid })
    await refused(b.client, 'exec_kill', { session_id: sid })
    await refused(b.client, 'sandbox_kill', { sandbox_id: sandbox })

    // A's sandbox and command are untouched.
    assert.equal((await sh(a.client, sandbox, 'test -e /tmp/b-was-here && echo yes || echo no')).trim(), 'no')
    const poll = await call(a.client, 'exec_poll', { session_id: sid })
    assert.equal(poll.structuredContent.exit_code, undefined, "B's exec_kill ended A's command")
    await call(a.client, 'exec_kill', { session_id: sid })

    // A's MCP session id is no use to B.
    for (const msg of [
      { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'sandbox_list', arguments: {} } },
      { jsonrpc: '2.0', id: 2, method: 'ping' }
    ]) {
      const res = await post(tokenB, msg, { 'Mcp-Session-Id': a.transport.sessionId, 'MCP-Protocol-Version': '2025-11-25' })
      assert.ok(res.status === 403 || res.status === 404, `B in A's MCP session: ${res.status} ${await res.text()}`)
    }
    await a.client.ping()
  })

  test('sandbox_kill ends the sandbox', async () => {
    await call(a.client, 'sandbox_kill', { sandbox_id: sandbox })
    await refused(a.client, 'exec', { sandbox_id: sandbox, command: 'true' })
  })
})
