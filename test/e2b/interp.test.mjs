// hutch's code interpreter through E2B's Code Interpreter SDK
// (@e2b/code-interpreter), unchanged: Sandbox.create() asks for E2B's
// template code-interpreter-v1, which hutch serve maps to hutch's
// code-interpreter image. Run by TestE2BCodeInterpreter
// (cmd/hutch/e2b_linux_test.go), which starts a daemon whose image store
// holds the image and sets E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
const { Sandbox } = await import('@e2b/code-interpreter')

const made = []
after(async () => {
  await Promise.all(made.map((id) => Sandbox.kill(id).catch(() => {})))
})

async function create (opts = {}) {
  const sbx = await Sandbox.create({ timeoutMs: 600_000, ...opts })
  made.push(sbx.sandboxId)
  return sbx
}

const sbx = await create({ envs: { GLOBAL_VAR: 'from-create' } })

test('python: state, streams in order, errors, env vars', async () => {
  assert.equal((await sbx.getInfo()).templateId, 'code-interpreter-v1')
  await sbx.runCode('x = 1')
  const r = await sbx.runCode('x += 1; x')
  assert.equal(r.text, '2')
  assert.equal(r.results[0].isMainResult, true)

  const seen = []
  const out = await sbx.runCode('import sys\nprint("one", flush=True)\nprint("two", file=sys.stderr, flush=True)\nprint("three", flush=True)', {
    onStdout: (m) => seen.push('out:' + m.line),
    onStderr: (m) => seen.push('err:' + m.line)
  })
  assert.deepEqual(seen, ['out:one\n', 'err:two\n', 'out:three\n'])
  assert.deepEqual(out.logs.stdout, ['one\n', 'three\n'])
  assert.deepEqual(out.logs.stderr, ['two\n'])

  const errs = []
  const bad = await sbx.runCode('1 / 0', { onError: (e) => errs.push(e.name) })
  assert.equal(bad.error.name, 'ZeroDivisionError')
  assert.equal(bad.error.value, 'division by zero')
  assert.match(bad.error.traceback, /1 \/ 0/)
  assert.deepEqual(errs, ['ZeroDivisionError'])
  assert.equal((await sbx.runCode('x')).text, '2') // the context goes on

  // env vars: the sandbox's at create, and one execution's own.
  const env = await sbx.runCode('import os; os.getenv("FOO", "default") + " " + os.getenv("GLOBAL_VAR", "none")', { envs: { FOO: 'bar' } })
  assert.equal(env.text, 'bar from-create')
  assert.equal((await sbx.runCode('os.getenv("FOO", "default")')).text, 'default')
  const over = await sbx.runCode('os.getenv("GLOBAL_VAR")', { envs: { GLOBAL_VAR: 'over' } })
  assert.equal(over.text, 'over')
  assert.equal((await sbx.runCode('os.getenv("GLOBAL_VAR")')).text, 'from-create')
})

test('python: a chart as PNG and as data, a DataFrame as data', async () => {
  const plot = await sbx.runCode([
    'import matplotlib.pyplot as plt',
    'plt.figure()',
    'plt.plot([1, 2, 3], [1, 4, 9], label="squares")',
    'plt.title("Growth")',
    'plt.xlabel("Time (s)")',
    'plt.ylabel("Size [m]")',
    'plt.show()'
  ].join('\n'))
  assert.equal(plot.results.length, 1)
  const chart = plot.results[0]
  assert.deepEqual(Buffer.from(chart.png, 'base64').subarray(0, 4), Buffer.from([0x89, 0x50, 0x4e, 0x47]))
  assert.deepEqual(chart.extra, {})
  assert.equal(chart.chart.type, 'line')
  assert.equal(chart.chart.title, 'Growth')
  assert.equal(chart.chart.x_unit, 's')
  assert.equal(chart.chart.y_unit, 'm')
  assert.deepEqual(chart.chart.elements[0].points, [[1, 1], [2, 4], [3, 9]])

  const df = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})')
  assert.deepEqual(df.results[0].data, { a: [1, 2], b: ['x', 'y'] })
  assert.match(df.results[0].html, /<table/)
})

// HUTCH_E2B_REDUCED (a slow tier's run) leaves the contexts out: their
// kernels are the sandbox's processes as any other, started and restarted
// the same way under every tier; the run of the namespace tier has them.
const reduced = process.env.HUTCH_E2B_REDUCED && `reduced run: ${process.env.HUTCH_E2B_REDUCED}`

test('contexts: create with cwd, list, restart, remove', { skip: reduced }, async () => {
  const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
  assert.equal(ctx.language, 'python')
  assert.equal(ctx.cwd, '/tmp')
  const list = await sbx.listCodeContexts()
  assert.deepEqual(list.slice(0, 2).map((c) => [c.language, c.cwd]), [['python', '/home/user'], ['javascript', '/home/user']])
  assert.equal(list[list.length - 1].id, ctx.id)

  assert.equal((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, '/tmp')
  await sbx.runCode('y = 5', { context: ctx })
  assert.equal((await sbx.runCode('y', { context: ctx })).text, '5')
  assert.equal((await sbx.runCode('y')).error.name, 'NameError') // contexts are apart

  await sbx.restartCodeContext(ctx)
  assert.equal((await sbx.runCode('y', { context: ctx })).error.name, 'NameError')

  await sbx.removeCodeContext(ctx)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
  await assert.rejects(sbx.runCode('1', { context: ctx }), /not found/)
})

test('a client that gives up interrupts the execution; the next runs at once', async () => {
  await assert.rejects(sbx.runCode('import time\ntime.sleep(300)', { timeoutMs: 3000 }), /timed out/i)
  const next = await sbx.runCode('1 + 1', { timeoutMs: 60_000 })
  assert.equal(next.text, '2')
})

test('javascript and typescript', async () => {
  const js = await sbx.runCode('const a = 20; console.log("hello"); a + 22', { language: 'js' })
  assert.equal(js.text, '42')
  assert.deepEqual(js.logs.stdout, ['hello\n'])
  assert.equal((await sbx.runCode('a', { language: 'javascript' })).text, '20')
  const tla = await sbx.runCode("await Promise.resolve('Hello World!')", { language: 'js' })
  assert.equal(tla.text, 'Hello World!')
  const esm = await sbx.runCode("import { readFileSync } from 'fs'\nreadFileSync('/etc/hostname', 'utf8').length > 0", { language: 'js' })
  assert.equal(esm.text, 'true')
  const ts = await sbx.runCode('function add(a: number, b: number): number { return a + b }\nadd(1, 2)', { language: 'ts' })
  assert.equal(ts.text, '3')
  const err = await sbx.runCode('null.x', { language: 'js' })
  assert.equal(err.error.name, 'TypeError')
  const env = await sbx.runCode('process.env.FOO', { language: 'js', envs: { FOO: 'bar' } })
  assert.equal(env.text, 'bar')
  assert.equal((await sbx.runCode('process.env.FOO ?? "unset"', { language: 'js' })).text, 'unset')
})

test('/execute takes the envd access token; the contexts are the port\'s', async () => {
  const url = process.env.E2B_SANDBOX_URL
  const headers = { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999' }
  if (sbx.trafficAccessToken) headers['E2B-Traffic-Access-Token'] = sbx.trafficAccessToken
  const denied = await fetch(url + '/execute', { method: 'POST', headers, body: JSON.stringify({ code: '1' }) })
  assert.equal(denied.status, 401)
  assert.match((await denied.json()).message, /X-Access-Token/)
  const wrong = await fetch(url + '/execute', { method: 'POST', headers: { ...headers, 'X-Access-Token': 'nope' }, body: JSON.stringify({ code: '1' }) })
  assert.equal(wrong.status, 401)
  await wrong.text()
  const list = await fetch(url + '/contexts', { headers })
  assert.equal(list.status, 200)
  assert.ok((await list.json()).some((c) => c.language === 'python'))
})

test('code that takes the sandbox\'s memory loses its kernel, not the sandbox', { skip: !process.env.HUTCH_TEST_OOM && 'HUTCH_TEST_OOM is not set (the daemon\'s memory limit per sandbox)' }, async () => {
  await sbx.runCode('kept = 1')
  const hog = await sbx.runCode('chunks = []\nwhile True:\n    chunks.append(b"x" * (64 << 20))', { timeoutMs: 120_000 })
  assert.equal(hog.error?.name, 'ContextRestarting', JSON.stringify(hog.error))
  const next = await sbx.runCode('"kept" in globals(), 6 * 7')
  assert.equal(next.text, '(False, 42)') // a new kernel
  const cmd = await sbx.commands.run('echo alive')
  assert.equal(cmd.stdout, 'alive\n')
})
