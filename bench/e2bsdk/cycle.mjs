// cycle.mjs is the E2B side of bench/e2bsdk: E2B's JavaScript SDK (the
// `e2b` package of test/e2b) against hutch serve. It reads one line per
// cycle on stdin and answers each with one line on stdout: the
// milliseconds from the start of Sandbox.create to the first output of
// commands.run('echo ok'), then the create alone, or "error MESSAGE".
// The sandbox is killed after each cycle, outside the timing. E2B_API_KEY,
// E2B_API_URL and E2B_SANDBOX_URL name the daemon; argv[2] is the
// directory whose node_modules holds e2b.
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

const rl = readline.createInterface({ input: process.stdin })
for await (const _ of rl) {
  try {
    process.stdout.write((await cycle()) + '\n')
  } catch (e) {
    process.stdout.write('error ' + String(e?.message ?? e).replace(/\n/g, ' ') + '\n')
  }
}
