// E2B's JavaScript SDK, unchanged, against hutch serve. Run by
// TestE2BSDK (cmd/hutch/e2b_linux_test.go), which starts the daemon and sets
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY. The tests named
// "control plane" use E2B's REST API only; those named "envd" use E2B's
// in-sandbox API too.
import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { readFileSync } from 'node:fs'
import https from 'node:https'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
// HUTCH_E2B_SDK names the SDK package to test: 'e2b' (package.json pins
// it), or an alias of an older release there (e2b-2.50, which connects by
// POST /sandboxes/{id}/connect, as the Python SDK does).
const sdk = process.env.HUTCH_E2B_SDK || 'e2b'
const { Sandbox, SandboxError, CommandExitError, NotFoundError, SandboxNotFoundError, TimeoutError, FileType, FilesystemEventType, Template, BuildError, waitForFile } = await import(sdk)

// What an older release lacks, its tests skip or leave out, saying so:
// since(v) is whether the SDK under test is release v or later.
const sdkVersion = JSON.parse(readFileSync(new URL(`./node_modules/${sdk}/package.json`, import.meta.url))).version
const since = (v) => {
  const [a, b] = [sdkVersion, v].map((x) => x.split('.').map(Number))
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] > b[i]
  return true
}
const lacks = (v, what) => !since(v) && `e2b ${sdkVersion} has no ${what} (since ${v})`

// HUTCH_E2B_KUBERNETES (TestServeKubernetesE2B, test/k8s) runs the suite
// against hutch serve --kubernetes, each sandbox a pod: what a pod cannot
// do its tests skip, saying why (onKube), or assert the refusal naming
// Kubernetes (kube).
const kube = !!process.env.HUTCH_E2B_KUBERNETES
const onKube = (why) => kube && `on Kubernetes: ${why}`

// HUTCH_E2B_TIER is the daemon's default tier: under gVisor snapshots keep
// the sandbox's memory, and a fork's processes go on where the source's
// were; in the namespace tier they keep its files only.
const tier = process.env.HUTCH_E2B_TIER || 'namespace'

// With E2B_DOMAIN (TestE2BSDKDomain), the SDK finds the daemon by E2B's
// domain layout alone: only the tests of 'domain' run.
const domain = process.env.E2B_DOMAIN
for (const v of domain ? ['E2B_API_KEY'] : ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) throw new Error(`${v} is not set`)
}
// HUTCH_E2B_SUITES (a reduced run, with HUTCH_E2B_REDUCED saying why)
// names the suites that run, separated by commas: the others skip, saying
// so.
const only = process.env.HUTCH_E2B_SUITES ? process.env.HUTCH_E2B_SUITES.split(',') : null
const suite = (name, fn) => {
  if (domain) return describe.skip(name, fn)
  if (only && !only.includes(name)) {
    return describe(name, { skip: `reduced run: ${process.env.HUTCH_E2B_REDUCED || 'HUTCH_E2B_SUITES'}` }, fn)
  }
  return describe(name, fn)
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

// until polls f until it returns something truthy, failing with what (a
// string, or a function returning one) after ms.
async function until (f, what, ms = 10_000) {
  const end = Date.now() + ms
  for (;;) {
    const v = await f()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out waiting for ${typeof what === 'function' ? what() : what}`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

const text = (u8) => new TextDecoder().decode(u8)

async function listAll (opts) {
  const out = []
  const p = Sandbox.list(opts)
  while (p.hasNext) out.push(...await p.nextItems())
  return out
}

suite('control plane', () => {
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
    if (Sandbox.pause) await assert.rejects(Sandbox.pause(id), SandboxNotFoundError)
  })

  test('a wrong API key is refused', async () => {
    await assert.rejects(Sandbox.create({ apiKey: 'e2b_' + '0'.repeat(40) }), /invalid API key/)
  })

  test('unsupported options are refused, naming them', async () => {
    await assert.rejects(Sandbox.create('python', { timeoutMs: 10_000 }), /template "python"/)
    if (since('2.30.0')) { // the releases before send no network
      await assert.rejects(Sandbox.create({ network: { denyOut: ['10.0.0.0/8'] } }), /not address ranges/)
    }
  })

  test('mcp: the SDK starts the gateway as a command; a template without it fails as in E2B, leaving no sandbox', { skip: lacks('2.45.0', 'mcp') || (tier === 'microvm' && 'the microvm tier, a reduced run: the gateway is a command the sandbox runs, as under the other tiers, whose runs test it; its start and failure under emulation take half a minute') }, async () => {
    const metadata = { mcpTest: String(Date.now()) }
    await assert.rejects(Sandbox.create('base', { timeoutMs: 60_000, metadata, mcp: { invalid_server: {} } }), /Failed to start MCP gateway/)
    assert.deepEqual(await Sandbox.list({ query: { metadata } }).nextItems(), [])
  })

  test('pause, list by state, connect resumes', { skip: lacks('2.30.0', 'pause') }, async () => {
    const sbx = await create()
    if (kube) {
      await assert.rejects(sbx.pause(), /Kubernetes/)
      assert.equal((await sbx.getInfo()).state, 'running')
      return
    }
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

  test('pause without memory keeps the files, not the processes', { skip: lacks('2.45.0', 'pause without memory') || onKube('pause is refused') }, async () => {
    const sbx = await create()
    if (tier === 'microvm') {
      // The tier keeps a paused guest in memory: a pause without it is
      // refused, naming the tier (docs/microvm.md).
      await assert.rejects(sbx.pause({ keepMemory: false }), /tier microvm: a pause without memory/)
      await Sandbox.kill(sbx.sandboxId)
      return
    }
    await sbx.files.write('/home/user/kept.txt', 'kept')
    await sbx.commands.run('sleep 1000', { background: true })
    assert.equal(await sbx.pause({ keepMemory: false }), true)
    assert.equal(await Sandbox.pause(sbx.sandboxId, { keepMemory: false }), false, 'pausing a paused sandbox')
    // A paused sandbox without memory boots again (its root layer kept;
    // under gVisor its /tmp, a tmpfs, is new): a reboot asks for nothing
    // more.
    const again = await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' })
    assert.equal((await again.getInfo()).state, 'running')
    assert.equal(await again.files.read('/home/user/kept.txt'), 'kept')
    const ps = await again.commands.run(`for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' <$f; echo; done`)
    assert.ok(!ps.stdout.includes('sleep 1000'), ps.stdout)

    // One paused with its memory boots again too when asked (E2B's
    // onResume 'reboot', which the releases before 2.50 do not send): a
    // new boot ID, its processes gone, its files kept.
    if (since('2.50.0')) {
      await again.commands.run('sleep 1000', { background: true })
      const boot = (await again.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout
      assert.equal(await again.pause(), true)
      const rebooted = await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' })
      assert.equal((await rebooted.getInfo()).state, 'running')
      assert.notEqual((await rebooted.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout, boot)
      const after = await rebooted.commands.run(`for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' <$f; echo; done`)
      assert.ok(!after.stdout.includes('sleep 1000'), after.stdout)
      assert.equal(await rebooted.files.read('/home/user/kept.txt'), 'kept')
    }
    await Sandbox.kill(sbx.sandboxId) // within the tenant's memory quota for the tests after it
  })

  test('lifecycle: the timeout pauses; connect, or a request with autoResume, resumes', { skip: lacks('2.45.0', 'lifecycle with keepMemory') || onKube('pause is refused') }, async () => {
    const paused = (sbx) => until(async () => (await sbx.getInfo()).state === 'paused', `${sbx.sandboxId} paused by its timeout`, 60_000)
    // Without autoResume only connect resumes it.
    const a = await create({ lifecycle: { onTimeout: 'pause', autoResume: false } })
    assert.deepEqual((await a.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false })
    await a.setTimeout(1_000)
    await paused(a)
    assert.equal(await a.isRunning(), false)
    await assert.rejects(a.commands.run('true'))
    assert.equal((await a.getInfo()).state, 'paused')
    await a.connect({ timeoutMs: 60_000 })
    assert.equal((await a.getInfo()).state, 'running')
    assert.equal(await a.isRunning(), true)

    // With autoResume a command wakes it.
    const b = await create({ lifecycle: { onTimeout: 'pause', autoResume: true } })
    assert.deepEqual((await b.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true })
    await b.commands.run('sleep 1000', { background: true })
    await b.setTimeout(1_000)
    await paused(b)
    assert.equal((await b.commands.run('echo awake')).stdout, 'awake\n')
    assert.equal((await b.getInfo()).state, 'running')
    const ps = await b.commands.run(`for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' <$f; echo; done`)
    assert.ok(ps.stdout.includes('sleep 1000'), 'woken with its memory:\n' + ps.stdout)

    if (tier === 'microvm') {
      // A pause without memory is refused under the tier, naming it.
      await assert.rejects(create({ lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } }), /tier microvm: a pause without memory/)
      await Promise.all([a, b].map((s) => s.kill()))
      return
    }
    // Filesystem-only: connect boots it again, its files kept.
    await assert.rejects(create({ lifecycle: { onTimeout: { action: 'pause', keepMemory: false }, autoResume: true } }), /keepMemory/)
    const c = await create({ lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
    await c.files.write('/home/user/kept.txt', 'kept')
    const boot = (await c.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout
    await c.setTimeout(1_000)
    await paused(c)
    await assert.rejects(c.commands.run('true'))
    await c.connect({ timeoutMs: 60_000 })
    assert.equal(await c.files.read('/home/user/kept.txt'), 'kept')
    assert.notEqual((await c.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout, boot)
    await Promise.all([a, b, c].map((s) => s.kill()))
  })

  test('list: newest first, as E2B lists', async () => {
    const tag = `o${Date.now()}`
    const older = await create({ metadata: { order: tag } })
    const newer = await create({ metadata: { order: tag } })
    const all = await listAll({ query: { metadata: { order: tag } } })
    assert.deepEqual(all.map((s) => s.sandboxId), [newer.sandboxId, older.sandboxId])
    await Promise.all([older.kill(), newer.kill()])
  })

  test('network settings are applied', { skip: lacks('2.30.0', 'network settings') }, async () => {
    const off = await create({ allowInternetAccess: false })
    assert.equal((await off.getInfo()).allowInternetAccess, false)
    const some = await create({ network: { allowOut: ['example.com'], denyOut: ['0.0.0.0/0'] } })
    const info = await some.getInfo()
    assert.deepEqual(info.network.allowOut, ['example.com'])
  })
})


// remembers is what the process remembering starts in sbx writes anew
// (after its file is removed), or 'none' when nothing comes.
async function remembers (sbx) {
  const r = await sbx.commands.run('rm -f /home/user/alive; i=0; while [ ! -e /home/user/alive ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; cat /home/user/alive 2>/dev/null || echo none')
  return r.stdout.trim()
}

suite('snapshots and forks', () => {
  // HUTCH_E2B_REDUCED leaves this, the slowest test, out: it says why
  // (the earlier releases of TestE2BSDKReleases, whose snapshot calls
  // have not changed since; the gVisor run, whose snapshots of memory
  // internal/daemon tests), and TestE2BSDK runs it with the release
  // package.json pins.
  const skip = process.env.HUTCH_E2B_REDUCED ? `reduced run: ${process.env.HUTCH_E2B_REDUCED}`
    : typeof Sandbox.prototype.createSnapshot !== 'function' && `e2b ${sdkVersion} has no createSnapshot`
  test('createSnapshot, listSnapshots, create from it (by id and by name), fork, deleteSnapshot', { skip }, async (t) => {
    // Five sandboxes: gone at the test's end, not the suite's (the
    // tenant's memory quota).
    const mine = []
    t.after(() => Promise.all(mine.map((id) => Sandbox.kill(id).catch(() => {}))))
    const sbx = await create()
    mine.push(sbx.sandboxId)
    if (kube) {
      await assert.rejects(sbx.createSnapshot({ name: 'sdk-snap' }), /Kubernetes/)
      return
    }
    await sbx.files.write('/home/user/state.txt', 'before the snapshot')
    const snap = await sbx.createSnapshot({ name: 'sdk-snap' })
    assert.ok(snap.snapshotId)
    assert.deepEqual(snap.names, ['sdk-snap'])

    const listed = []
    for (const p = Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }); p.hasNext;) listed.push(...await p.nextItems())
    assert.ok(listed.some((s) => s.snapshotId === snap.snapshotId), 'listSnapshots has it')

    await sbx.files.write('/home/user/state.txt', 'after the snapshot')
    for (const template of [snap.snapshotId, 'sdk-snap']) {
      const from = await create({ template })
      mine.push(from.sandboxId)
      assert.equal(await from.files.read('/home/user/state.txt'), 'before the snapshot', `created from ${template}`)
      const r = await from.commands.run('whoami')
      assert.equal(r.stdout.trim(), 'user')
    }

    // A process holding a value in its memory only: a fork under gVisor
    // has it going on; in the namespace tier a fork's processes start
    // afresh (Sandbox.fork since 2.45).
    if (Sandbox.fork) {
      await sbx.commands.run(`echo kept-in-memory > /home/user/seed
sh -c 'read v < /home/user/seed; rm /home/user/seed; while :; do echo "$v" > /home/user/alive.new; mv /home/user/alive.new /home/user/alive; sleep 0.1; done' >/dev/null 2>&1 &
while [ ! -e /home/user/alive ]; do sleep 0.05; done`)
      const forks = await Sandbox.fork(sbx.sandboxId, { count: 2 })
      assert.equal(forks.length, 2)
      for (const f of forks) {
        assert.ok(f instanceof Sandbox, `a fork failed: ${f}`)
        mine.push(f.sandboxId)
        assert.equal(await f.files.read('/home/user/state.txt'), 'after the snapshot')
        assert.equal(await remembers(f), tier === 'gvisor' ? 'kept-in-memory' : 'none', `the fork's processes (tier ${tier})`)
      }
      assert.equal(await remembers(sbx), 'kept-in-memory', 'the source\'s process after the fork')
      await forks[0].files.write('/home/user/state.txt', 'fork 0')
      assert.equal(await forks[1].files.read('/home/user/state.txt'), 'after the snapshot', 'one fork\'s write reached the other')
      assert.equal(await sbx.files.read('/home/user/state.txt'), 'after the snapshot', 'a fork\'s write reached the source')
    }

    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false, 'deleting it twice')
    await assert.rejects(Sandbox.create(snap.snapshotId), (e) => e instanceof NotFoundError || /not found|404/i.test(String(e)))
  })
})

// HUTCH_E2B_TEMPLATE names a template of the daemon (hutch serve
// --template NAME=REF) whose image is the busybox image of hutch's tests
// (imagetest.Busybox: /etc/motd says "from the image", no /usr).
const template = process.env.HUTCH_E2B_TEMPLATE

suite('templates', () => {
  test('a template starts its image; an unknown one is not found', { skip: !template && 'HUTCH_E2B_TEMPLATE is not set' }, async () => {
    const sbx = await Sandbox.create(template, { timeoutMs: 60_000, metadata: { suite: 'template' } })
    made.push(sbx.sandboxId)
    const info = await sbx.getInfo()
    assert.equal(info.templateId, template)
    assert.equal(info.state, 'running')
    // The image's files, not the host's (the image has no shell E2B's
    // commands use: /bin/bash).
    assert.equal(await sbx.files.read('/etc/motd'), 'from the image\n')
    assert.equal(await sbx.files.exists('/usr/bin/env'), false)
    const listed = await listAll({ query: { metadata: { suite: 'template' } } })
    assert.deepEqual(listed.map((s) => [s.sandboxId, s.templateId]), [[sbx.sandboxId, template]])

    await assert.rejects(Sandbox.create('no-such-template', { timeoutMs: 10_000 }), (err) => {
      assert.ok(err instanceof SandboxError, `${err}`)
      if (since('2.50.0')) assert.equal(err.statusCode, 404)
      assert.match(err.message, /template "no-such-template"/)
      assert.match(err.message, new RegExp(template))
      return true
    })
    await sbx.kill() // its memory counts against the tenant's quota
  })
})

suite('template builds', () => {
  test('Template.build over base: copy, runCmd, env, workdir, start command; exists; create; tags; errors; background', { skip: lacks('2.30.0', 'Template.build(template, name)') || onKube('a build keeps its result in the daemon\'s image store; a pod\'s image is the cluster\'s') }, async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hutch-e2b-template-'))
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
    fs.mkdirSync(path.join(dir, 'folder'))
    fs.writeFileSync(path.join(dir, 'folder', 'test.txt'), 'This is a test file.\n')
    fs.symlinkSync('test.txt', path.join(dir, 'folder', 'link.txt'))
    const name = `sdk-${Date.now()}`
    const logs = []
    const tpl = Template({ fileContextPath: dir })
      .fromBaseImage()
      .copy('folder/*', 'folder', { forceUpload: true })
      .runCmd('cat folder/link.txt')
      .setEnvs({ FROM_TEMPLATE: 'yes' })
      .setWorkdir('/app')
      .runCmd('echo "$(whoami) $(pwd)" > made.txt')
      .runCmd('echo root > /etc/made-by-root', { user: 'root' })
      .setStartCmd('echo started > /tmp/started', waitForFile('/tmp/started'))
    if (tier === 'microvm') {
      // A build keeps its files as a snapshot of its sandbox, which the
      // tier's sandboxes cannot start from: the build fails before any
      // step runs, saying so.
      await assert.rejects(Template.build(tpl, name, { onBuildLogs: (e) => logs.push(e) }), /kept as a snapshot.*tier microvm: a start from a snapshot's files/s)
      return
    }
    const info = await Template.build(tpl, name, { onBuildLogs: (e) => logs.push(e), memoryMB: 768 })
    assert.ok(info.templateId && info.buildId, JSON.stringify(info))
    assert.ok(logs.some((e) => e.message === 'This is a test file.'), logs.map((e) => e.message).join('\n'))
    assert.equal(await Template.exists(name), true)
    assert.equal(await Template.exists('base'), true)
    assert.equal(await Template.exists(`${name}-nope`), false)

    const sbx = await Sandbox.create(name, { timeoutMs: 60_000 })
    made.push(sbx.sandboxId)
    const got = await sbx.getInfo()
    assert.equal(got.templateId, info.templateId)
    if ('memoryMB' in got) assert.equal(got.memoryMB, 768)
    // The template's workdir is the commands' default working directory.
    const r = await sbx.commands.run('pwd; cat /app/made.txt /etc/made-by-root ~/folder/test.txt /tmp/started; echo $FROM_TEMPLATE; readlink ~/folder/link.txt')
    assert.equal(r.stdout, '/app\nuser /app\nroot\nThis is a test file.\nstarted\nyes\ntest.txt\n')
    assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
    if (typeof Sandbox.prototype.getMetrics === 'function') {
      // The build's memoryMB is its sandboxes' memory limit.
      const m = await until(async () => (await sbx.getMetrics()).at(-1), 'a metrics sample', 60_000)
      assert.equal(m.memTotal, 768 * 2 ** 20)
    }
    await sbx.kill()

    const tagged = await Template.assignTags(`${name}:default`, ['prod', 'stable'])
    assert.equal(tagged.buildId, info.buildId)
    assert.deepEqual(tagged.tags, ['prod', 'stable'])
    await assert.rejects(Template.assignTags(name, ':bad'))
    assert.deepEqual((await Template.getTags(info.templateId)).map((x) => x.tag), ['default', 'prod', 'stable'])
    await Template.removeTags(name, 'stable')
    assert.deepEqual((await Template.getTags(info.templateId)).map((x) => x.tag), ['default', 'prod'])

    await assert.rejects(Template.build(Template().fromTemplate('base').runCmd('whoami', { user: 'root123' }), `${name}-bad`), (err) => {
      assert.ok(err instanceof BuildError, `${err}`)
      assert.equal(err.message, "failed to run command 'whoami': command failed: unauthenticated: invalid username: 'root123'")
      return true
    })
    await assert.rejects(Template.build(Template().fromImage('hutch.test/not-in-the-store:1'), `${name}-img`), /not in the daemon's image store/)

    const bg = await Template.buildInBackground(Template().fromTemplate(name).runCmd('sleep 2; cat /app/made.txt'), `${name}-bg`)
    assert.equal((await Template.getBuildStatus(bg)).status, 'building')
    const done = await until(async () => {
      const st = await Template.getBuildStatus(bg)
      return st.status !== 'building' && st
    }, 'the background build', 120_000)
    assert.equal(done.status, 'ready', JSON.stringify(done.reason))
    assert.ok(done.logEntries.some((e) => e.message === 'user /app'), JSON.stringify(done.logEntries))
  })
})

suite('envd', () => {
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

  test('the default network: public hosts through the proxy, never private addresses or denied hosts', async () => {
    if (kube) {
      // A pod's egress is its node's proxy, which takes allowed names
      // only: denied hosts are refused; private addresses stay closed.
      await assert.rejects(create({ network: { denyOut: ['evil.example'] } }), /denied_domains.*Kubernetes/)
      const sbx = await create()
      const r = await sbx.commands.run(
        'for u in http://10.0.0.1/ http://169.254.169.254/latest/meta-data/; do ' +
        'curl -s -o /dev/null -w "%{http_code} " --max-time 5 ${HTTP_PROXY:+-x "$HTTP_PROXY"} "$u"; done; echo')
      for (const code of r.stdout.trim().split(' ')) assert.ok(code === '403' || code === '000', r.stdout)
      return
    }
    const sbx = await create({ network: { denyOut: ['evil.example'] } })
    const r = await sbx.commands.run(
      'echo "$HTTPS_PROXY"; for u in http://10.0.0.1/ http://169.254.169.254/latest/meta-data/ http://evil.example/; do ' +
      'curl -s -o /dev/null -w "%{http_code} " --max-time 5 -x "$HTTP_PROXY" "$u"; done; echo')
    assert.equal(r.stdout, 'http://127.0.0.1:3128\n403 403 403 \n')
  })

  test('offline sandbox has no network', { skip: onKube('a pod keeps its interface, its agent\'s way in (its egress is none: dev.hutch.network none, tested in test/k8s)') }, async () => {
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

suite('envd: commands', () => {
  test('streamed output arrives in order, as it is written, before the result', async () => {
    const sbx = await create()
    const chunks = []
    let firstAt = 0
    let resolved = false
    const r = await sbx.commands.run('echo first; sleep 0.3; echo "second $(date +%s%3N)"; echo e1 >&2; echo e2 >&2', {
      onStdout: (d) => {
        assert.ok(!resolved, 'stdout after the result')
        if (chunks.length === 0) firstAt = Date.now()
        chunks.push(d)
      },
      onStderr: (d) => { assert.ok(!resolved, 'stderr after the result'); chunks.push('ERR:' + d) }
    })
    resolved = true
    assert.equal(chunks[0], 'first\n', 'the first chunk is the first line alone')
    const second = chunks.join('').match(/second (\d+)\n/)
    assert.ok(second, `chunks ${JSON.stringify(chunks)}`)
    assert.ok(firstAt > 0 && firstAt < Number(second[1]), `first chunk at ${firstAt}, second written at ${second[1]}`)
    assert.equal(chunks.filter((c) => !c.startsWith('ERR:')).join(''), r.stdout)
    assert.equal(chunks.filter((c) => c.startsWith('ERR:')).map((c) => c.slice(4)).join(''), 'e1\ne2\n')
    assert.match(r.stdout, /^first\nsecond \d+\n$/)
    assert.equal(r.stderr, 'e1\ne2\n')
  })

  test('the start event comes first: pid is the command\'s, even when it prints at once', async () => {
    const sbx = await create()
    const h = await sbx.commands.run('echo $$', { background: true })
    const r = await h.wait()
    assert.equal(r.stdout, `${h.pid}\n`)
    assert.equal(h.exitCode, 0)
  })

  test('exit codes, CommandExitError, envs, cwd, user', async () => {
    const sbx = await create()
    assert.equal((await sbx.commands.run('exit 0')).exitCode, 0)
    await assert.rejects(sbx.commands.run('echo partial; echo oops >&2; exit 42'), (e) => {
      assert.ok(e instanceof CommandExitError, `got ${e}`)
      assert.equal(e.exitCode, 42)
      assert.equal(e.error, 'exit status 42')
      assert.equal(e.stdout, 'partial\n')
      assert.equal(e.stderr, 'oops\n')
      return true
    })
    const env = await sbx.commands.run('printf "%s|%s" "$A" "$B"', { envs: { A: 'x y', B: '$literal' } })
    assert.equal(env.stdout, 'x y|$literal')
    assert.equal((await sbx.commands.run('pwd', { cwd: '/usr' })).stdout, '/usr\n')
    await sbx.files.makeDir('/home/user/sub')
    assert.equal((await sbx.commands.run('pwd', { cwd: 'sub' })).stdout, '/home/user/sub\n')
    assert.equal((await sbx.commands.run('id -u; id -g; echo $HOME', { user: 'user' })).stdout, '1000\n1000\n/home/user\n')
    assert.equal((await sbx.commands.run('id -u; id -g; echo $HOME; pwd', { user: 'root' })).stdout, '0\n0\n/root\n/root\n')
  })

  test('timeoutMs ends the command with a timeout error and kills it', async () => {
    const sbx = await create()
    const t0 = Date.now()
    await assert.rejects(sbx.commands.run('sleep 10', { timeoutMs: 500 }), (e) => {
      assert.ok(e instanceof TimeoutError, `got ${e?.name}: ${e?.message}`)
      return true
    })
    assert.ok(Date.now() - t0 < 5_000, 'the timeout is honoured')
    await until(async () => !(await sbx.commands.list()).some((p) => p.args?.includes('sleep 10')), 'the command to be gone from the list', 3_000)
    const ps = await sbx.commands.run('ps -eo args= | grep -c "^sleep 10$" || true')
    assert.equal(ps.stdout, '0\n', 'no sleep 10 is left running')
  })

  test('background: pid, list, wait, kill', async () => {
    const sbx = await create()
    const h = await sbx.commands.run('sleep 30', { background: true, cwd: '/tmp', envs: { BG: '1' } })
    assert.ok(Number.isInteger(h.pid) && h.pid > 0)
    assert.equal(h.exitCode, undefined, 'a running command has no exit code')
    const listed = (await sbx.commands.list()).find((p) => p.pid === h.pid)
    assert.ok(listed, 'the background command is listed')
    assert.equal(listed.cmd, '/bin/bash')
    assert.deepEqual(listed.args, ['-l', '-c', 'sleep 30'])
    assert.equal(listed.cwd, '/tmp')
    assert.equal(listed.envs.BG, '1')
    assert.equal(listed.tag, undefined)
    const done = await sbx.commands.run('echo done', { background: true })
    assert.equal((await done.wait()).stdout, 'done\n')

    assert.equal(await h.kill(), true)
    await assert.rejects(h.wait(), (e) => {
      assert.ok(e instanceof CommandExitError, `got ${e}`)
      assert.equal(e.exitCode, -1)
      assert.match(e.error ?? '', /signal: killed/)
      return true
    })
    await until(async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid), 'the killed command to leave the list')
    assert.equal((await sbx.commands.run(`kill -0 ${h.pid} 2>/dev/null && echo alive || echo gone`, { user: 'root' })).stdout, 'gone\n')
    assert.equal(await sbx.commands.kill(h.pid), false, 'killing it again')
    assert.equal(await sbx.commands.kill(999_999), false, 'an unknown pid')
  })

  test('sendStdin to a background cat', async () => {
    const sbx = await create()
    let out = ''
    const h = await sbx.commands.run('cat', { background: true, stdin: true, onStdout: (d) => { out += d } })
    await sbx.commands.sendStdin(h.pid, 'hello\n')
    await until(() => out === 'hello\n', 'cat to echo the first line')
    await (h.sendStdin ? h.sendStdin(new TextEncoder().encode('bytes\n')) : sbx.commands.sendStdin(h.pid, 'bytes\n'))
    await until(() => out === 'hello\nbytes\n', 'cat to echo the second line')
    if (!h.closeStdin) return void await h.kill() // closeStdin since 2.30
    await h.closeStdin()
    const r = await h.wait()
    assert.equal(r.stdout, 'hello\nbytes\n')
  })

  test('connect to a running command by pid', async () => {
    const sbx = await create()
    const h = await sbx.commands.run('echo early; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo later; echo late-err >&2; exit 7', { background: true })
    await until(() => h.stdout === 'early\n', 'the first output')
    const got = []
    const c = await sbx.commands.connect(h.pid, { onStdout: (d) => got.push(d) })
    assert.equal(c.pid, h.pid)
    await sbx.files.write('/tmp/go', '')
    await assert.rejects(c.wait(), (e) => {
      assert.ok(e instanceof CommandExitError, `got ${e}`)
      assert.equal(e.exitCode, 7)
      assert.equal(e.stdout, 'later\n')
      assert.equal(e.stderr, 'late-err\n')
      return true
    })
    assert.equal(got.join(''), 'later\n')
    await assert.rejects(h.wait(), (e) => e instanceof CommandExitError && e.stdout === 'early\nlater\n')
    await assert.rejects(sbx.commands.connect(h.pid), NotFoundError)
  })
})

suite('envd: pty', () => {
  test('create, sendInput, resize, kill', async () => {
    const sbx = await create()
    let seen = ''
    const h = await sbx.pty.create({ cols: 91, rows: 27, onData: (d) => { seen += text(d) } })
    assert.ok(h.pid > 0)
    const enc = new TextEncoder()
    await sbx.pty.sendInput(h.pid, enc.encode('echo hi\n'))
    await until(() => /[\r\n]hi\r\n/.test(seen), () => `the shell to print hi; it showed ${JSON.stringify(seen)}`)
    await sbx.pty.sendInput(h.pid, enc.encode('stty size; echo $TERM\n'))
    await until(() => /[\r\n]27 91\r\nxterm-256color\r\n/.test(seen), () => `stty to print 27 91; the terminal showed ${JSON.stringify(seen)}`)
    await sbx.pty.resize(h.pid, { cols: 120, rows: 40 })
    await sbx.pty.sendInput(h.pid, enc.encode('stty size\n'))
    await until(() => /[\r\n]40 120\r\n/.test(seen), () => `stty to print 40 120; the terminal showed ${JSON.stringify(seen)}`)
    assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid), 'the pty is listed')
    assert.equal(await sbx.pty.kill(h.pid), true)
    await assert.rejects(h.wait(), CommandExitError)
    assert.equal(await sbx.pty.kill(h.pid), false)
  })
})

suite('envd: files', () => {
  test('read as text, bytes, blob and stream', async () => {
    const sbx = await create()
    const bin = Uint8Array.from([0, 255, 1, 254, 0, 10, 13, 0xc3, 0x28, 255, 0])
    await sbx.files.write('/home/user/bin', bin)
    const bytes = await sbx.files.read('/home/user/bin', { format: 'bytes' })
    assert.ok(bytes instanceof Uint8Array)
    assert.deepEqual([...bytes], [...bin])
    const blob = await sbx.files.read('/home/user/bin', { format: 'blob' })
    assert.ok(blob instanceof Blob)
    assert.deepEqual([...new Uint8Array(await blob.arrayBuffer())], [...bin])
    const big = 'x'.repeat(300_000) + 'end'
    await sbx.files.write('big.txt', big)
    const stream = await sbx.files.read('big.txt', { format: 'stream' })
    const parts = []
    for await (const c of stream) parts.push(c)
    assert.equal(text(Buffer.concat(parts)), big)
    assert.equal(await sbx.files.read('/home/user/big.txt'), big)
    assert.equal(await sbx.files.read('/home/user/big.txt', { format: 'text' }), big)
    await sbx.files.write('empty', '')
    assert.equal(await sbx.files.read('empty'), '')
    await assert.rejects(sbx.files.read('/home/user/missing'), NotFoundError)
    await assert.rejects(sbx.files.read('/nope/missing', { format: 'bytes' }), NotFoundError)
  })

  test('write one and many; owners follow the user', async () => {
    const sbx = await create()
    const one = await sbx.files.write('/home/user/one.txt', 'one')
    assert.equal(one.path, '/home/user/one.txt')
    assert.equal(one.name, 'one.txt')
    const many = await sbx.files.write([
      { path: '/home/user/m/a.txt', data: 'A' },
      { path: 'm/b.bin', data: new Uint8Array([0, 255]) },
      { path: '/tmp/c.txt', data: new Blob(['C']) }
    ])
    assert.ok(Array.isArray(many))
    assert.deepEqual(many.map((w) => w.path), ['/home/user/m/a.txt', '/home/user/m/b.bin', '/tmp/c.txt'])
    assert.equal(await sbx.files.read('/home/user/m/a.txt'), 'A')
    assert.deepEqual([...await sbx.files.read('/home/user/m/b.bin', { format: 'bytes' })], [0, 255])
    assert.equal(await sbx.files.read('/tmp/c.txt'), 'C')
    await sbx.files.write('/home/user/one.txt', 'overwritten')
    assert.equal(await sbx.files.read('one.txt'), 'overwritten')

    await sbx.files.write('/tmp/byroot', 'r', { user: 'root' })
    await sbx.files.write('/tmp/byuser', 'u', { user: 'user' })
    assert.equal((await sbx.files.getInfo('/tmp/byroot')).owner, 'root')
    assert.equal((await sbx.files.getInfo('/tmp/byuser')).owner, 'user')
    assert.equal((await sbx.commands.run('stat -c %u:%g /tmp/byroot /tmp/byuser /home/user/m /home/user/m/a.txt')).stdout, '0:0\n1000:1000\n1000:1000\n1000:1000\n')
    await sbx.files.write('/root/secret', 's', { user: 'root' })
    assert.equal(await sbx.files.read('/root/secret', { user: 'root' }), 's')
  })

  test('list, exists, getInfo, makeDir, rename, remove', async () => {
    const sbx = await create()
    await sbx.files.write('/home/user/l/f.txt', 'hello')
    assert.equal(await sbx.files.makeDir('/home/user/l/d'), true)
    assert.equal(await sbx.files.makeDir('/home/user/l/d'), false, 'an existing directory')
    const ents = (await sbx.files.list('/home/user/l')).sort((a, b) => a.name.localeCompare(b.name))
    assert.deepEqual(ents.map((e) => [e.name, e.type, e.path]), [
      ['d', FileType.DIR, '/home/user/l/d'],
      ['f.txt', FileType.FILE, '/home/user/l/f.txt']
    ])
    assert.deepEqual((await sbx.files.list('l', { depth: 2 })).map((e) => e.path).sort(), ['/home/user/l/d', '/home/user/l/f.txt'])
    assert.equal(await sbx.files.exists('/home/user/l/f.txt'), true)
    assert.equal(await sbx.files.exists('l/d'), true)
    assert.equal(await sbx.files.exists('/home/user/l/none'), false)

    const before = Date.now()
    const info = await sbx.files.getInfo('/home/user/l/f.txt')
    assert.equal(info.name, 'f.txt')
    assert.equal(info.type, FileType.FILE)
    assert.equal(info.path, '/home/user/l/f.txt')
    assert.equal(info.size, 5)
    assert.equal(info.owner, 'user')
    assert.equal(info.group, 'user')
    assert.equal(info.mode & 0o777, Number.parseInt((await sbx.commands.run('stat -c %a /home/user/l/f.txt')).stdout, 8))
    assert.match(info.permissions, /^-[rwx-]{9}$/)
    assert.ok(info.modifiedTime instanceof Date)
    assert.ok(Math.abs(info.modifiedTime.getTime() - before) < 60_000, `modified ${info.modifiedTime.toISOString()}`)
    const dinfo = await sbx.files.getInfo('/home/user/l/d')
    assert.equal(dinfo.type, FileType.DIR)
    assert.match(dinfo.permissions, /^d[rwx-]{9}$/)
    await assert.rejects(sbx.files.getInfo('/home/user/l/none'), NotFoundError)

    const moved = await sbx.files.rename('/home/user/l/f.txt', '/home/user/l/d/g.txt')
    assert.equal(moved.path, '/home/user/l/d/g.txt')
    assert.equal(moved.name, 'g.txt')
    assert.equal(await sbx.files.exists('/home/user/l/f.txt'), false)
    assert.equal(await sbx.files.read('/home/user/l/d/g.txt'), 'hello')
    await assert.rejects(sbx.files.rename('/home/user/l/none', '/home/user/l/x'), NotFoundError)

    await sbx.files.remove('/home/user/l/d/g.txt')
    assert.equal(await sbx.files.exists('/home/user/l/d/g.txt'), false)
    await sbx.files.remove('/home/user/l')
    assert.equal(await sbx.files.exists('/home/user/l'), false)
  })

  test('watchDir reports create, write and remove', async () => {
    const sbx = await create()
    await sbx.files.makeDir('/home/user/w')
    const events = []
    const h = await sbx.files.watchDir('/home/user/w', (e) => { events.push(e) })
    const has = (type) => events.some((e) => e.name === 'f.txt' && e.type === type)
    try {
      await sbx.files.write('/home/user/w/f.txt', 'a')
      await until(() => has(FilesystemEventType.CREATE), 'a create event')
      await sbx.commands.run('echo more >> /home/user/w/f.txt')
      await until(() => has(FilesystemEventType.WRITE), 'a write event')
      await sbx.files.remove('/home/user/w/f.txt')
      await until(() => has(FilesystemEventType.REMOVE), 'a remove event')
    } finally {
      await h.stop()
    }
    const types = events.filter((e) => e.name === 'f.txt').map((e) => e.type)
    assert.ok(types.indexOf(FilesystemEventType.CREATE) < types.indexOf(FilesystemEventType.WRITE))
    assert.equal(types.at(-1), FilesystemEventType.REMOVE)
  })

  test('watchDir reports renames and, recursively, changes in new subdirectories', async () => {
    const sbx = await create()
    await sbx.files.makeDir('/home/user/r')
    const events = []
    const h = await sbx.files.watchDir('/home/user/r', (e) => { events.push(e) }, { recursive: true })
    const has = (name, type) => events.some((e) => e.name === name && e.type === type)
    try {
      await sbx.files.write('/home/user/r/a.txt', 'a')
      await until(() => has('a.txt', FilesystemEventType.CREATE), 'a create event')
      await sbx.files.rename('/home/user/r/a.txt', '/home/user/r/b.txt')
      await until(() => has('a.txt', FilesystemEventType.RENAME), 'a rename event for the old name')
      await until(() => has('b.txt', FilesystemEventType.CREATE), 'a create event for the new name')
      await sbx.commands.run('mkdir -p /home/user/r/sub/deep && echo x > /home/user/r/sub/deep/c.txt')
      await until(() => has('sub', FilesystemEventType.CREATE), 'a create event for the subdirectory')
      await until(() => has('sub/deep/c.txt', FilesystemEventType.CREATE), 'a create event in the subdirectory')
      await sbx.commands.run('echo more >> /home/user/r/sub/deep/c.txt')
      await until(() => has('sub/deep/c.txt', FilesystemEventType.WRITE), 'a write event in the subdirectory')
    } finally {
      await h.stop()
    }
    assert.ok(!events.some((e) => e.name.includes('.hutch-write-')), 'no events of temporary files')
  })

  test('watchDir, recursive, then makeDir: the event of the new directory, and the sandbox answers', async () => {
    const sbx = await create()
    await sbx.files.makeDir('/home/user/m')
    const events = []
    const h = await sbx.files.watchDir('/home/user/m', (e) => { events.push(e) }, { recursive: true })
    const has = (name, type) => events.some((e) => e.name === name && e.type === type)
    try {
      assert.equal(await sbx.files.makeDir('/home/user/m/sub'), true)
      await until(() => has('sub', FilesystemEventType.CREATE), () => `a create event for sub in ${JSON.stringify(events)}`)
      await sbx.files.write('/home/user/m/sub/f.txt', 'x')
      await until(() => has('sub/f.txt', FilesystemEventType.CREATE), () => `a create event for sub/f.txt in ${JSON.stringify(events)}`)
    } finally {
      await h.stop()
    }
    assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n')
    assert.ok(await sbx.isRunning())
    await sbx.kill()
  })

  test('as envd: remove of a missing path succeeds; a symlink\'s target is absolute', async () => {
    const sbx = await create()
    await sbx.files.remove('/home/user/never-there')
    await sbx.files.write('test_file.txt', 'test')
    await sbx.commands.run('ln -s test_file.txt test_symlink.txt && mkdir d && ln -s ../test_symlink.txt d/chain')
    const info = await sbx.files.getInfo('test_symlink.txt')
    const { stdout: pwd } = await sbx.commands.run('pwd')
    assert.equal(info.name, 'test_symlink.txt')
    assert.equal(info.symlinkTarget, pwd.trim() + '/test_file.txt')
    assert.equal((await sbx.files.getInfo('d/chain')).symlinkTarget, pwd.trim() + '/test_file.txt')
    assert.equal((await sbx.files.getInfo('test_file.txt')).symlinkTarget, undefined)
    await sbx.kill()
  })
})

suite('envd: files in place, metadata, signed URLs', () => {
  test('files.write writes in place: a watch sees write', async () => {
    const sbx = await create()
    await sbx.files.write('/home/user/wp/f.txt', 'first')
    const { stdout: ino } = await sbx.commands.run('stat -c %i /home/user/wp/f.txt')
    const events = []
    const h = await sbx.files.watchDir('/home/user/wp', (e) => { events.push(e) })
    try {
      await sbx.files.write('/home/user/wp/f.txt', 'second')
      await until(() => events.some((e) => e.name === 'f.txt' && e.type === FilesystemEventType.WRITE), () => `a write event in ${JSON.stringify(events)}`)
    } finally {
      await h.stop()
    }
    assert.ok(!events.some((e) => e.name.includes('.hutch-write-')), 'no events of temporary files')
    assert.equal(await sbx.files.read('/home/user/wp/f.txt'), 'second')
    assert.equal((await sbx.commands.run('stat -c %i /home/user/wp/f.txt')).stdout, ino, 'the file keeps its inode')
  })

  test('metadata: stored as user.e2b.* extended attributes, surfaced everywhere, replaced on overwrite', { skip: lacks('2.30.0', 'file metadata') || (tier === 'microvm' && 'the microvm tier: the guest\'s root layer is its kernel\'s tmpfs, which keeps no user.* extended attributes (its 6.1 kernel); a write with metadata is refused there, saying so') }, async () => {
    const sbx = await create()
    const metadata = { author: 'mish', purpose: 'upload' }
    for (const useOctetStream of [false, true]) {
      const name = `meta-${useOctetStream}.txt`
      const info = await sbx.files.write(name, 'content', { metadata, useOctetStream })
      assert.deepEqual(info.metadata, metadata)
      assert.deepEqual((await sbx.files.getInfo(name)).metadata, metadata)
    }
    const many = await sbx.files.write([{ path: 'mm/1.txt', data: '1' }, { path: 'mm/2.txt', data: '2' }], { metadata: { source: 'many' } })
    assert.deepEqual(many.map((i) => i.metadata), [{ source: 'many' }, { source: 'many' }])
    assert.deepEqual((await sbx.files.list('mm')).map((e) => e.metadata), [{ source: 'many' }, { source: 'many' }])
    assert.deepEqual((await sbx.files.rename('meta-false.txt', 'renamed.txt')).metadata, metadata)
    const { stdout: attr } = await sbx.commands.run('getfattr -n user.e2b.author --only-values renamed.txt 2>/dev/null || python3 -c "import os; print(os.getxattr(\'renamed.txt\', \'user.e2b.author\').decode(), end=\'\')"')
    assert.equal(attr, 'mish', 'the metadata is an extended attribute in the sandbox')
    assert.equal((await sbx.files.write('renamed.txt', 'again')).metadata, undefined)
    assert.equal((await sbx.files.getInfo('renamed.txt')).metadata, undefined)
    // Set in the sandbox directly, as a program there would.
    await sbx.commands.run('setfattr -n user.e2b.tag -v direct renamed.txt 2>/dev/null || python3 -c "import os; os.setxattr(\'renamed.txt\', \'user.e2b.tag\', b\'direct\')"')
    assert.deepEqual((await sbx.files.getInfo('renamed.txt')).metadata, { tag: 'direct' })
  })

  test('signed URLs: downloadUrl and uploadUrl, with and without expiry; refused when altered or expired', async () => {
    const sbx = await create({ secure: true })
    await sbx.files.write('hello.txt', 'hello world')
    for (const opts of [{}, { useSignatureExpiration: 10_000 }]) {
      const res = await fetch(await sbx.downloadUrl('hello.txt', opts))
      assert.equal(res.status, 200)
      assert.equal(await res.text(), 'hello world')
    }
    const expired = await fetch(await sbx.downloadUrl('hello.txt', { useSignatureExpiration: -10_000 }))
    assert.equal(expired.status, 401)
    assert.deepEqual(await expired.json(), { code: 401, message: 'signature is already expired' })
    const other = new URL(await sbx.downloadUrl('hello.txt'))
    other.searchParams.set('path', '/etc/shadow')
    const altered = await fetch(other)
    assert.equal(altered.status, 401)
    assert.deepEqual(await altered.json(), { code: 401, message: 'invalid signature' })

    const form = new FormData()
    form.append('file', 'file content')
    const up = await fetch(await sbx.uploadUrl('up.txt', { user: 'root', useSignatureExpiration: 10_000 }), { method: 'POST', body: form })
    assert.equal(up.status, 200)
    assert.deepEqual(await up.json(), [{ name: 'up.txt', path: '/root/up.txt', type: 'file' }])
    assert.equal(await sbx.files.read('/root/up.txt', { user: 'root' }), 'file content')
    const unsigned = new URL(await sbx.downloadUrl('hello.txt'))
    unsigned.searchParams.delete('signature')
    assert.equal((await fetch(unsigned)).status, 401)
  })
})

suite('envd: the sandbox ends under a command', () => {
  test('killing the sandbox while a command runs is a TimeoutError saying so', { skip: lacks('2.30.0', 'TimeoutError for a killed sandbox') }, async () => {
    const sbx = await create()
    const cmd = await sbx.commands.run('sleep 60', { background: true })
    await sbx.kill()
    const err = await cmd.wait().catch((e) => e)
    assert.ok(err instanceof TimeoutError, `${err?.name}: ${err?.message}`)
    assert.match(err.message, /sandbox was killed or reached its end of life/)
  })
})

suite('metrics and network', () => {
  // The tests before are done: their sandboxes go, so that the tenant's
  // memory quota has room.
  before(async () => { await Promise.all(made.splice(0).map((id) => Sandbox.kill(id).catch(() => {}))) })

  test('getMetrics: CPU, memory and disk sampled over time', { skip: (typeof Sandbox.prototype.getMetrics !== 'function' && 'this SDK has no getMetrics') }, async () => {
    const sbx = await create()
    await sbx.commands.run('end=$(( $(date +%s) + 3 )); while [ "$(date +%s)" -lt "$end" ]; do :; done; dd if=/dev/zero of=/home/user/big bs=1M count=50 2>/dev/null')
    // A pod's CPU and memory are its agent's answer; its disk is the
    // node's, not sampled: 0 of 0. A microVM's are its QEMU's; its disk
    // is in the guest's memory, not sampled either.
    const noDisk = kube || tier === 'microvm'
    const ms = await until(async () => {
      const m = await sbx.getMetrics()
      return m.length > 1 && m.some((x) => x.cpuUsedPct > 0) && (noDisk || m.at(-1).diskUsed >= m[0].diskUsed + 45 * 2 ** 20) ? m : null
    }, noDisk ? 'samples with CPU used' : 'samples with CPU used and the disk 50 MiB fuller', 60_000)
    for (const m of ms) {
      assert.ok(m.timestamp instanceof Date && !isNaN(m.timestamp), `timestamp ${m.timestamp}`)
      assert.ok(m.cpuCount >= 1 && m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, `cpu ${m.cpuUsedPct}% of ${m.cpuCount}`)
      assert.ok(m.memUsed > 0 && m.memUsed <= m.memTotal, `memory ${m.memUsed} of ${m.memTotal}`)
      if (noDisk) {
        assert.ok(m.diskUsed === 0 && m.diskTotal === 0, `the disk of a pod or a guest ${m.diskUsed} of ${m.diskTotal}`)
      } else {
        assert.ok(m.diskUsed <= m.diskTotal && m.diskTotal > 0, `disk ${m.diskUsed} of ${m.diskTotal}`)
      }
    }
    if (since('2.30.0')) { // 2.10 sends no start and end
      const later = await Sandbox.getMetrics(sbx.sandboxId, { start: new Date(Date.now() + 3600_000) })
      assert.deepEqual(later, [])
    }
    await assert.rejects(Sandbox.getMetrics('sb-nosuchsandbox'), SandboxNotFoundError)
  })

  // The daemon lets every sandbox's proxy reach 127.0.0.1 (--allow-private),
  // on ports 80 and 443 for rules without a port, as E2B's are.
  test('updateNetwork: the proxy obeys the new rules at once', { skip: typeof Sandbox.prototype.updateNetwork !== 'function' && 'this SDK has no updateNetwork' }, async (t) => {
    const srv = http.createServer((req, res) => res.end('upstream\n'))
    try {
      await new Promise((resolve, reject) => { srv.once('error', reject); srv.listen(80, '127.0.0.1', resolve) })
    } catch (e) {
      t.skip(`a server on 127.0.0.1:80: ${e.message}`)
      return
    }
    try {
      const sbx = await create({ network: { allowOut: ['example.com'] } })
      if (kube) {
        await assert.rejects(sbx.updateNetwork({ allowOut: ['example.org'] }), /Kubernetes/)
        assert.deepEqual((await sbx.getInfo()).network.allowOut, ['example.com'])
        return
      }
      const status = async () => (await sbx.commands.run('curl -s -o /dev/null -w "%{http_code}" --max-time 10 --noproxy "" -x "$HTTP_PROXY" http://127.0.0.1/')).stdout
      assert.equal(await status(), '403')
      await sbx.updateNetwork({ allowOut: ['127.0.0.1'] })
      assert.equal(await status(), '200')
      assert.deepEqual((await sbx.getInfo()).network.allowOut, ['127.0.0.1'])
      await sbx.updateNetwork({ allowOut: ['example.com'] })
      assert.equal(await status(), '403')
      await assert.rejects(sbx.updateNetwork({ allowOut: ['10.0.0.0/8'] }), /10\.0\.0\.0\/8/)
      await assert.rejects(Sandbox.updateNetwork('sb-nosuchsandbox', { allowOut: [] }), SandboxNotFoundError)
    } finally {
      srv.close()
    }
  })
})

// The domain layout (hutch serve --domain D --tls-cert --tls-key), as
// E2B's SDK uses it with E2B_DOMAIN=D and no other URL: https://api.D,
// envd at https://49983-ID.D, getHost(port) at PORT-ID.D; name resolution
// and the test's CA come from resolve-domain.cjs and NODE_EXTRA_CA_CERTS.
describe('domain', { skip: !domain && 'E2B_DOMAIN is not set' }, () => {
  // A server for port: GET answers what it got as JSON; a WebSocket
  // upgrade echoes one short text frame as "echo: " + it.
  const server = `
const http = require('http'), crypto = require('crypto')
const srv = http.createServer((req, res) => {
  res.setHeader('content-type', 'application/json')
  res.end(JSON.stringify({ host: req.headers.host, path: req.url, token: req.headers['e2b-traffic-access-token'] || null }))
})
srv.on('upgrade', (req, sock) => {
  const accept = crypto.createHash('sha1').update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64')
  sock.write('HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: ' + accept + '\\r\\n\\r\\n')
  sock.on('data', (b) => {
    const len = b[1] & 0x7f, mask = b.subarray(2, 6)
    const data = Buffer.from(b.subarray(6, 6 + len).map((x, i) => x ^ mask[i % 4]))
    const out = Buffer.from('echo: ' + data.toString())
    sock.write(Buffer.concat([Buffer.from([0x81, out.length]), out]))
  })
})
srv.listen(Number(process.argv[2]), '127.0.0.1')
`
  const port = 8000

  async function serve (sbx) {
    await sbx.files.write('/home/user/server.js', server)
    await sbx.commands.run(`node /home/user/server.js ${port}`, { background: true })
    await until(async () => (await sbx.commands.run(`node -e "require('net').connect(${port}, '127.0.0.1').on('connect', () => process.exit(0)).on('error', () => process.exit(1))"`).catch(() => null))?.exitCode === 0, `the server on ${port}`, 30_000)
  }

  // websocket opens a WebSocket to url (https) with headers, sends text,
  // and returns the text of the frame that comes back.
  function websocket (url, headers, text) {
    return new Promise((resolve, reject) => {
      const key = crypto.randomBytes(16).toString('base64')
      const req = https.request(url, { agent: false, headers: { ...headers, Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Key': key, 'Sec-WebSocket-Version': '13' } })
      req.on('response', (res) => {
        res.resume()
        req.destroy()
        reject(new Error(`no upgrade: ${res.statusCode}`))
      })
      req.on('error', reject)
      req.on('upgrade', (res, sock) => {
        const want = crypto.createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64')
        if (res.headers['sec-websocket-accept'] !== want) return reject(new Error('bad Sec-WebSocket-Accept'))
        const mask = crypto.randomBytes(4)
        const data = Buffer.from(text)
        sock.write(Buffer.concat([Buffer.from([0x81, 0x80 | data.length]), mask, data.map((x, i) => x ^ mask[i % 4])]))
        sock.once('data', (b) => { sock.destroy(); resolve(b.subarray(2, 2 + (b[1] & 0x7f)).toString()) })
      })
      req.end()
    })
  }

  test('create, commands and files through api.D and 49983-ID.D', async () => {
    assert.equal(process.env.E2B_API_URL, undefined)
    assert.equal(process.env.E2B_SANDBOX_URL, undefined)
    const sbx = await create()
    assert.equal(sbx.sandboxDomain, domain)
    assert.ok(sbx.trafficAccessToken, 'a private sandbox has a traffic access token')
    const r = await sbx.commands.run('id -un; pwd')
    assert.equal(r.stdout, 'user\n/home/user\n')
    await sbx.files.write('/home/user/a.txt', 'through the domain')
    assert.equal(await sbx.files.read('/home/user/a.txt'), 'through the domain')
    assert.equal((await sbx.getInfo()).sandboxId, sbx.sandboxId)
  })

  test('getHost: a private port needs the traffic access token', async () => {
    const sbx = await create()
    await serve(sbx)
    const url = `https://${sbx.getHost(port)}/p?q=1`
    assert.equal(sbx.getHost(port), `${port}-${sbx.sandboxId}.${domain}`)
    const denied = await fetch(url)
    assert.equal(denied.status, 403)
    assert.match(await denied.text(), /e2b-traffic-access-token/i)
    const other = await create()
    const wrong = await fetch(url, { headers: { 'e2b-traffic-access-token': other.trafficAccessToken } })
    assert.equal(wrong.status, 403)
    await wrong.arrayBuffer()
    const res = await fetch(url, { headers: { 'e2b-traffic-access-token': sbx.trafficAccessToken } })
    assert.equal(res.status, 200)
    assert.deepEqual(await res.json(), { host: sbx.getHost(port), path: '/p?q=1', token: null })
    assert.equal(await websocket(url, { 'e2b-traffic-access-token': sbx.trafficAccessToken }, 'hi'), 'echo: hi')
    await assert.rejects(websocket(url, {}, 'hi'), /403/)
  })

  test('getHost: allowPublicTraffic and maskRequestHost', async () => {
    const sbx = await create({ network: { allowPublicTraffic: true, maskRequestHost: 'custom-host.example.com:${PORT}' } })
    assert.equal(sbx.trafficAccessToken, undefined)
    await serve(sbx)
    const url = `https://${sbx.getHost(port)}/`
    const res = await fetch(url)
    assert.equal(res.status, 200)
    assert.equal((await res.json()).host, `custom-host.example.com:${port}`)
    assert.equal(await websocket(url, {}, 'public'), 'echo: public')
    const info = await sbx.getInfo()
    assert.equal(info.network?.allowPublicTraffic, true)
    assert.equal(info.network?.maskRequestHost, 'custom-host.example.com:${PORT}')
  })

  test('getHost: a sandbox that is gone is E2B\'s 502', async () => {
    const sbx = await create({ network: { allowPublicTraffic: true } })
    await sbx.kill()
    const res = await fetch(`https://${sbx.getHost(3000)}`)
    assert.equal(res.status, 502)
    assert.deepEqual(await res.json(), { code: 502, message: 'The sandbox was not found', sandboxId: sbx.sandboxId })
  })

  // E2B's volume content API is at https://api.D too, where the SDK
  // sends it with E2B_DOMAIN alone.
  test('volumes: the content API through api.D', async () => {
    const { Volume } = await import(sdk)
    const vol = await Volume.create('through-the-domain')
    try {
      await vol.writeFile('/a.txt', 'through api.D')
      assert.equal(await vol.readFile('/a.txt'), 'through api.D')
      assert.deepEqual((await vol.list('/')).map((e) => e.name), ['a.txt'])
    } finally {
      assert.equal(await Volume.destroy(vol.volumeId), true)
    }
  })
})
