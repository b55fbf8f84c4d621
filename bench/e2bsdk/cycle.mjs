// cycle.mjs is the E2B side of bench/e2bsdk: E2B's JavaScript SDK (the
// `e2b` package of test/e2b) against hutch serve. It reads one line per
// cycle on stdin, "sdk" or "fetch", and answers each with one line on
// stdout: the milliseconds from the start of the create to the first
// output of `echo ok`, then the create alone, or "error MESSAGE". "sdk"
// is Sandbox.create and commands.run; "fetch" is the floor of a node
// client: the same two requests (E2B's create, envd's
// process.Process/Start as a Connect stream) with node's own fetch, no
// SDK. The sandbox is killed after each cycle, outside the timing.
// E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL name the daemon; argv[2]
// is the directory whose node_modules holds e2b.
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'
import readline from 'node:readline'

const require = createRequire(process.argv[2] + '/')
const { Sandbox } = await import(pathToFileURL(require.resolve('e2b')).href)

async function cycle() {
  const t0 = performance.now()
  const sbx = await Sandbox.create()
  const tc = performance.now()
  let first = 0
  try {
    const r = await sbx.commands.run('echo ok', {
      onStdout: () => { if (!first) first = performance.now() },
    })
    if (r.exitCode !== 0 || r.stdout !== 'ok\n') throw new Error(`echo ok: exit ${r.exitCode}, output ${JSON.stringify(r.stdout)}`)
  } finally {
    await sbx.kill()
  }
  return `${(first - t0).toFixed(3)} ${(tc - t0).toFixed(3)}`
}

const api = process.env.E2B_API_URL
const envd = process.env.E2B_SANDBOX_URL
const key = process.env.E2B_API_KEY

// fetchCycle is cycle with node's fetch alone: POST /sandboxes, then
// process.Process/Start with one Connect envelope, read up to the first
// data event.
async function fetchCycle() {
  const t0 = performance.now()
  const res = await fetch(api + '/sandboxes', {
    method: 'POST', headers: { 'X-API-Key': key, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 300 }),
  })
  const sbx = await res.json()
  if (!res.ok) throw new Error(`create: ${res.status} ${JSON.stringify(sbx)}`)
  const tc = performance.now()
  let first = 0
  try {
    const msg = Buffer.from(JSON.stringify({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'echo ok'], envs: {} } }))
    const env = Buffer.alloc(5 + msg.length)
    env.writeUInt32BE(msg.length, 1)
    msg.copy(env, 5)
    const r = await fetch(envd + '/process.Process/Start', {
      method: 'POST', body: env,
      headers: {
        'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1',
        'E2b-Sandbox-Id': sbx.sandboxID, 'X-Access-Token': sbx.envdAccessToken,
        Authorization: 'Basic ' + Buffer.from('user:').toString('base64'),
      },
    })
    if (!r.ok) throw new Error(`Start: ${r.status} ${await r.text()}`)
    let buf = Buffer.alloc(0)
    for await (const chunk of r.body) {
      buf = Buffer.concat([buf, chunk])
      while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
        const n = buf.readUInt32BE(1)
        const m = JSON.parse(buf.subarray(5, 5 + n).toString())
        buf = buf.subarray(5 + n)
        if (!first && m.event?.data?.stdout) first = performance.now()
      }
    }
    if (!first) throw new Error('Start: no output')
  } finally {
    await fetch(api + '/sandboxes/' + sbx.sandboxID, { method: 'DELETE', headers: { 'X-API-Key': key } })
  }
  return `${(first - t0).toFixed(3)} ${(tc - t0).toFixed(3)}`
}

const rl = readline.createInterface({ input: process.stdin })
for await (const line of rl) {
  try {
    process.stdout.write((await (line.trim() === 'fetch' ? fetchCycle() : cycle())) + '\n')
  } catch (e) {
    process.stdout.write('error ' + String(e?.message ?? e).replace(/\n/g, ' ') + '\n')
  }
}
