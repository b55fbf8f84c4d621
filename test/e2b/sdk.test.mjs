// E2B's JavaScript SDK, unchanged, against hutch serve. Run by
// TestE2BSDK (cmd/hutch/e2b_test.go), which starts the daemon and sets
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY. The tests named
// "control plane" use E2B's REST API only; those named "envd" use E2B's
// in-sandbox API too.
import { test, describe, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, NotFoundError, SandboxNotFoundError, InvalidArgumentError, FileType } from 'e2b'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) throw new Error(`${v} is not set`)
}

const made = []
async function create (opts = {}) {
  const sbx = await Sandbox.create({ timeoutMs: 60_000, ...opts })
  made.push(sbx.sandboxId)
  return sbx
}
after(async () => {
  await Promise.all(made.map((id) => Sandbox.kill(id).catch(() => {})))
})

async function listAll (opts) {
  const out = []
  const p = Sandbox.list(opts)
  while (p.hasNext) out.push(...await p.nextItems())
  return out
}

describe('control plane', () => {
  test('create, getInfo, list, setTimeout, kill', async () => {
    const tag = `t${Date.now()}`
    const sbx = await create({ metadata: { suite: tag, 'key with space': 'a/b c' }, envs: { FOO: 'bar' }, timeoutMs: 120_000 })
    assert.match(sbx.sandboxId, /^sb-/)

    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.templateId, 'base')
    assert.equal(info.state, 'running')
    assert.deepEqual(info.metadata, { suite: tag, 'key with space': 'a/b c' })
    const life = info.endAt - info.startedAt
    assert.ok(life > 110_000 && life <= 121_000, `lifetime ${life} ms, want about 120 s`)

    const other = await create({ metadata: { suite: tag, other: '1' } })
    const mine = await listAll({ query: { metadata: { suite: tag } } })
    assert.deepEqual(mine.map((s) => s.sandboxId).sort(), [sbx.sandboxId, other.sandboxId].sort())
    const spaced = await listAll({ query: { metadata: { 'key with space': 'a/b c' } } })
    assert.deepEqual(spaced.map((s) => s.sandboxId), [sbx.sandboxId])
    const paged = Sandbox.list({ query: { metadata: { suite: tag } }, limit: 1 })
    const first = await paged.nextItems()
    assert.equal(first.length, 1)
    assert.ok(paged.hasNext, 'a page of 1 of 2 sandboxes has a next page')
    const second = await paged.nextItems()
    assert.equal(second.length, 1)
    assert.notEqual(first[0].sandboxId, second[0].sandboxId)
    assert.ok(!paged.hasNext)

    await sbx.setTimeout(30_000)
    const info2 = await sbx.getInfo()
    const left = info2.endAt - Date.now()
    assert.ok(left > 20_000 && left <= 31_000, `${left} ms left, want about 30 s`)

    await sbx.kill()
    assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a killed sandbox is gone')
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
    const after = await listAll({ query: { metadata: { suite: tag } } })
    assert.deepEqual(after.map((s) => s.sandboxId), [other.sandboxId])
  })

  test('unknown ids', async () => {
    const id = 'sb-doesnotexist'
    assert.equal(await Sandbox.kill(id), false)
    await assert.rejects(Sandbox.getInfo(id), SandboxNotFoundError)
    await assert.rejects(Sandbox.setTimeout(id, 10_000), SandboxNotFoundError)
    await assert.rejects(Sandbox.connect(id), SandboxNotFoundError)
    await assert.rejects(Sandbox.pause(id), SandboxNotFoundError)
  })

  test('a wrong API key is refused', async () => {
    await assert.rejects(Sandbox.create({ apiKey: 'e2b_' + '0'.repeat(40) }), /invalid API key/)
  })

  test('unsupported options are refused, naming them', async () => {
    await assert.rejects(Sandbox.create('python', { timeoutMs: 10_000 }), /template "python"/)
    await assert.rejects(Sandbox.create({ lifecycle: { onTimeout: 'pause' } }), /autoPause/)
    await assert.rejects(Sandbox.create({ allowInternetAccess: true }), /no unrestricted internet access/)
  })

  test('pause, list by state, connect resumes', async () => {
    const sbx = await create()
    assert.equal(await sbx.pause(), true)
    assert.equal(await Sandbox.pause(sbx.sandboxId), false, 'pausing a paused sandbox')
    assert.equal((await sbx.getInfo()).state, 'paused')
    const paused = await listAll({ query: { state: ['paused'] } })
    assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId))
    const running = await listAll({ query: { state: ['running'] } })
    assert.ok(!running.some((s) => s.sandboxId === sbx.sandboxId))

    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 90_000 })
    assert.equal(again.sandboxId, sbx.sandboxId)
    const info = await again.getInfo()
    assert.equal(info.state, 'running')
    assert.ok(info.endAt - Date.now() > 80_000)
  })

  test('network settings are applied', async () => {
    const off = await create({ allowInternetAccess: false })
    assert.equal((await off.getInfo()).allowInternetAccess, false)
    const some = await create({ network: { allowOut: ['example.com'], denyOut: ['0.0.0.0/0'] } })
    const info = await some.getInfo()
    assert.deepEqual(info.network.allowOut, ['example.com'])
  })
})

describe('envd', () => {
  test('isRunning, and not after kill', async () => {
    const sbx = await create()
    assert.equal(await sbx.isRunning(), true)
    await sbx.kill()
    assert.equal(await sbx.isRunning(), false)
  })

  test('commands: output, exit codes, envs, cwd, user', async () => {
    const sbx = await create({ envs: { FROM_CREATE: 'c1' } })
    const out = []; const err = []
    const r = await sbx.commands.run('echo out1; echo err1 >&2; echo out2', {
      onStdout: (d) => out.push(d), onStderr: (d) => err.push(d)
    })
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'out1\nout2\n')
    assert.equal(r.stderr, 'err1\n')
    assert.equal(out.join(''), 'out1\nout2\n')
    assert.equal(err.join(''), 'err1\n')

    await assert.rejects(sbx.commands.run('echo bad >&2; exit 3'), (e) => {
      assert.ok(e instanceof CommandExitError, `got ${e}`)
      assert.equal(e.exitCode, 3)
      assert.equal(e.stderr, 'bad\n')
      return true
    })

    const env = await sbx.commands.run('echo $FROM_CREATE $FOO', { envs: { FOO: 'f1' } })
    assert.equal(env.stdout, 'c1 f1\n')
    assert.equal((await sbx.commands.run('pwd')).stdout, '/home/user\n')
    assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
    assert.equal((await sbx.commands.run('id -un; id -u')).stdout, 'user\n1000\n')
    assert.equal((await sbx.commands.run('id -u', { user: 'root' })).stdout, '0\n')
    assert.equal((await sbx.commands.run('echo $HOME')).stdout, '/home/user\n')
  })

  test('commands: background and kill', async () => {
    const sbx = await create()
    const h = await sbx.commands.run('sleep 60', { background: true })
    assert.ok(h.pid > 0)
    const list = await sbx.commands.list()
    assert.ok(list.some((p) => p.pid === h.pid), 'the background command is listed')
    assert.equal(await sbx.commands.kill(h.pid), true)
    await assert.rejects(h.wait(), CommandExitError)
    assert.equal(await sbx.commands.kill(h.pid), false, 'killing it again')
  })

  test('files: write, read, list, exists, makeDir, rename, remove', async () => {
    const sbx = await create()
    const bin = new Uint8Array(256).map((_, i) => i)
    await sbx.files.write('/home/user/data.bin', bin)
    const back = await sbx.files.read('/home/user/data.bin', { format: 'bytes' })
    assert.deepEqual(Buffer.from(back), Buffer.from(bin))
    await sbx.files.write('notes.txt', 'hello')
    assert.equal(await sbx.files.read('/home/user/notes.txt'), 'hello')
    assert.equal((await sbx.commands.run('stat -c %u notes.txt')).stdout, '1000\n')

    assert.equal(await sbx.files.makeDir('/home/user/d/e'), true)
    assert.equal(await sbx.files.exists('/home/user/d/e'), true)
    assert.equal(await sbx.files.exists('/home/user/nope'), false)
    const entries = await sbx.files.list('/home/user')
    const names = entries.map((e) => e.name).sort()
    assert.deepEqual(names, ['d', 'data.bin', 'notes.txt'])
    assert.equal(entries.find((e) => e.name === 'd').type, FileType.DIR)

    await sbx.files.rename('/home/user/notes.txt', '/home/user/d/moved.txt')
    assert.equal(await sbx.files.read('/home/user/d/moved.txt'), 'hello')
    await sbx.files.remove('/home/user/d')
    assert.equal(await sbx.files.exists('/home/user/d'), false)
    await assert.rejects(sbx.files.read('/home/user/missing'), NotFoundError)
  })

  test('offline sandbox has no network', async () => {
    const sbx = await create({ allowInternetAccess: false })
    const r = await sbx.commands.run('cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d " "')
    assert.equal(r.stdout, 'lo\n')
  })

  test('a wrong access token is refused', async () => {
    const sbx = await create()
    const forged = new Sandbox({ sandboxId: sbx.sandboxId, envdAccessToken: 'wrong', envdVersion: sbx.envdApi.version })
    await assert.rejects(forged.commands.run('true'), /invalid envd access token|unauthenticated|401/i)
  })
})
