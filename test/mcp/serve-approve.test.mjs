// Approvals through /mcp on hutch serve, with MCP's TypeScript SDK over
// streamable HTTP. Run by TestMCPServeApprovals
// (cmd/hutch/mcp_serve_approve_linux_test.go), which starts two daemons,
// each with a sandbox whose policy asks about touch (and allows the
// rest), and sets:
//   HUTCH_MCP_URL, HUTCH_MCP_TOKEN, HUTCH_SANDBOX
//       /mcp of a daemon whose questions wait 10 minutes, a token of the
//       sandbox's tenant, the sandbox
//   HUTCH_MCP_URL_SHORT, HUTCH_MCP_TOKEN_SHORT, HUTCH_SANDBOX_SHORT
//       the same of a daemon whose questions expire after 300 ms
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js'

const env = (name) => {
  const v = process.env[name]
  assert.ok(v, `${name} is not set`)
  return v
}
const daemon = { url: new URL(env('HUTCH_MCP_URL')), token: env('HUTCH_MCP_TOKEN'), sandbox: env('HUTCH_SANDBOX') }
const short = { url: new URL(env('HUTCH_MCP_URL_SHORT')), token: env('HUTCH_MCP_TOKEN_SHORT'), sandbox: env('HUTCH_SANDBOX_SHORT') }

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

// connect connects to d's /mcp; elicit, when given, answers its
// elicitations (and declares the capability).
async function connect (t, d, elicit) {
  const client = new Client({ name: 'hutch-approve-test', version: '1.0.0' }, elicit ? { capabilities: { elicitation: {} } } : {})
  if (elicit) client.setRequestHandler(ElicitRequestSchema, async (req) => elicit(req.params))
  await client.connect(new StreamableHTTPClientTransport(d.url, { requestInit: { headers: { Authorization: `Bearer ${d.token}` } } }))
  t.after(() => client.close())
  return async (command, extra = {}) => {
    const r = await client.callTool({ name: 'exec', arguments: { command, sandbox_id: d.sandbox, ...extra } }, undefined, { timeout: 300_000 })
    return { ...r, text: r.content.map((c) => c.text ?? '').join('\n') }
  }
}

// api calls d's API with its token.
async function api (d, method, path, body) {
  const resp = await fetch(new URL(path, d.url), {
    method,
    headers: { Authorization: `Bearer ${d.token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined
  })
  const text = await resp.text()
  return { status: resp.status, body: text ? JSON.parse(text) : null }
}

const listed = async (d) => {
  const r = await api(d, 'GET', `/v1/approvals?sandbox=${d.sandbox}`)
  assert.equal(r.status, 200, JSON.stringify(r.body))
  return Array.isArray(r.body) ? r.body : r.body.approvals
}

test('a client that elicits is asked, and its answer decides', { timeout: 10 * 60 * 1000 }, async (t) => {
  const asked = []
  let reply = null
  const exec = await connect(t, daemon, async (params) => {
    asked.push(params)
    return typeof reply === 'function' ? reply(params) : reply
  })

  await t.test('not asked where no rule asks', async () => {
    const r = await exec('echo hi')
    assert.ok(!r.isError, r.text)
    assert.equal(r.structuredContent.output, 'hi\n')
    assert.equal(asked.length, 0)
  })

  await t.test('answered once: it runs', async () => {
    reply = { action: 'accept', content: { answer: 'once' } }
    const r = await exec('touch once.txt && echo ran-once')
    assert.ok(!r.isError, r.text)
    assert.equal(r.structuredContent.output, 'ran-once\n')
    assert.equal(asked.length, 1)
    assert.ok(asked[0].message.includes('touch once.txt'), asked[0].message)
    assert.ok(asked[0].message.includes('rule: ask: [touch]'), asked[0].message)
    assert.deepEqual(asked[0].requestedSchema.properties.answer.enum, ['once', 'run', 'always', 'deny'])
  })

  await t.test('answered deny, declined: not run, and the result says why', async () => {
    for (const [name, answer] of [['denied', { action: 'accept', content: { answer: 'deny' } }], ['declined', { action: 'decline' }]]) {
      reply = answer
      const r = await exec(`touch ${name}.txt`)
      assert.equal(r.isError, true, `touch ${name}.txt was not refused: ${r.text}`)
      assert.match(r.text, new RegExp(`not approved: .*touch ${name}\\.txt`))
    }
    const ls = await exec('ls')
    assert.equal(ls.structuredContent.output, 'once.txt\n')
  })

  await t.test('a variable that changes what runs is asked about', async () => {
    reply = { action: 'accept', content: { answer: 'deny' } }
    const before = asked.length
    const r = await exec('echo hi > path.txt', { env: { PATH: '/tmp', LANG: 'C' } })
    assert.equal(r.isError, true, `not refused: ${r.text}`)
    assert.equal(asked.length, before + 1)
    assert.ok(asked.at(-1).message.includes('export PATH=/tmp'), asked.at(-1).message)
    const ls = await exec('ls')
    assert.equal(ls.structuredContent.output, 'once.txt\n')
  })

  await t.test('the API answers first: the elicitation is dropped, the answer decides', async () => {
    let answered
    const pending = new Promise((resolve) => { answered = resolve })
    // The client's user never answers; the question goes when the API's
    // answer came.
    reply = () => pending
    const running = exec('touch by-api.txt && echo ran-by-api')
    let waiting = []
    for (let i = 0; i < 600 && waiting.length === 0; i++) {
      waiting = await listed(daemon)
      if (waiting.length === 0) await sleep(100)
    }
    assert.equal(waiting.length, 1, 'the question is not listed by the API')
    assert.equal(waiting[0].kind, 'command')
    assert.match(waiting[0].subject, /touch by-api\.txt/)
    const a = await api(daemon, 'POST', `/v1/approvals/${waiting[0].id}`, { answer: 'once' })
    assert.ok(a.status < 300, JSON.stringify(a.body))
    const r = await running
    answered({ action: 'cancel' })
    assert.ok(!r.isError, r.text)
    assert.equal(r.structuredContent.output, 'ran-by-api\n')
    const again = await api(daemon, 'POST', `/v1/approvals/${waiting[0].id}`, { answer: 'deny' })
    assert.equal(again.status, 404)
    assert.ok(again.body.code && again.body.message, JSON.stringify(again.body))
  })
})

test('a client without elicitation waits for the API, else is refused at the expiry', { timeout: 10 * 60 * 1000 }, async (t) => {
  const exec = await connect(t, short, null)
  const r = await exec('touch unasked.txt')
  assert.equal(r.isError, true, `not refused: ${r.text}`)
  assert.match(r.text, /not approved: .*touch unasked\.txt/)
  assert.match(r.text, /no answer in time/)
  const ls = await exec('ls')
  assert.ok(!ls.isError, ls.text)
  assert.equal(ls.structuredContent.output, '')
  assert.deepEqual(await listed(short), [])
})
