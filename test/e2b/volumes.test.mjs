// E2B's volumes through E2B's JavaScript SDK, unchanged. Run by
// TestE2BSDKVolumes (cmd/hutch/e2b_linux_test.go), which sets E2B_API_URL,
// E2B_SANDBOX_URL, E2B_VOLUME_API_URL (the content API: the daemon too),
// E2B_API_KEY (tenant a) and HUTCH_E2B_OTHER_KEY (tenant b).
import { test } from 'node:test'
import assert from 'node:assert/strict'
const { Sandbox, AuthenticationError, Volume, VolumeError, VolumeNotFoundError, VolumePathNotFoundError, VolumeFileType } = await import('e2b')

const other = { apiKey: process.env.HUTCH_E2B_OTHER_KEY }

test('volumes: create, list, getInfo, destroy; per tenant', async () => {
  const vol = await Volume.create('vol-api')
  assert.match(vol.volumeId, /^vol_[0-9a-f]{24}$/)
  assert.equal(vol.name, 'vol-api')
  assert.match(vol.token, /^[0-9a-f]{64}$/)
  const second = await Volume.create('vol-api-2')

  const listed = await Volume.list()
  assert.deepEqual(listed.map((v) => v.name).slice(0, 2), ['vol-api-2', 'vol-api']) // newest first
  const info = await Volume.getInfo(vol.volumeId)
  assert.equal(info.name, 'vol-api')
  assert.equal(info.token, vol.token)
  assert.equal((await Volume.connect(vol.volumeId)).token, vol.token)

  await assert.rejects(Volume.create('vol-api'), VolumeError)
  await assert.rejects(Volume.create('no spaces'), VolumeError)
  await assert.rejects(Volume.create('x'.repeat(129)), VolumeError)

  // Tenant b sees none of a's volumes, by id or by name.
  assert.deepEqual(await Volume.list(other), [])
  await assert.rejects(Volume.getInfo(vol.volumeId, other), VolumeNotFoundError)
  await assert.rejects(Volume.getInfo('vol-api', other), VolumeNotFoundError)
  assert.equal(await Volume.destroy(vol.volumeId, other), false)
  assert.equal(await Volume.destroy('vol-api', other), false)
  // b may have a volume of the same name.
  const theirs = await Volume.create('vol-api', other)
  assert.notEqual(theirs.volumeId, vol.volumeId)
  assert.equal(await Volume.destroy(theirs.volumeId, other), true)

  assert.equal(await Volume.destroy(vol.volumeId), true)
  assert.equal(await Volume.destroy(vol.volumeId), false)
  await assert.rejects(Volume.getInfo(vol.volumeId), VolumeNotFoundError)
  assert.equal(await Volume.destroy(second.volumeId), true)
})

test('volume content: files, directories, metadata', async () => {
  const vol = await Volume.create('vol-content')
  try {
    let stat = await vol.writeFile('/hello.txt', 'Hello, volume!')
    assert.equal(stat.name, 'hello.txt')
    assert.equal(stat.type, VolumeFileType.FILE)
    assert.equal(stat.path, '/hello.txt')
    assert.equal(stat.size, 14)
    assert.equal(stat.mode, 0o644)
    assert.ok(stat.mtime instanceof Date && !isNaN(stat.mtime))
    assert.equal(await vol.readFile('/hello.txt'), 'Hello, volume!')

    const bytes = new Uint8Array([0, 1, 2, 255])
    await vol.writeFile('/bin.dat', bytes.buffer)
    assert.deepEqual(await vol.readFile('/bin.dat', { format: 'bytes' }), bytes)
    await vol.writeFile('/stream.txt', new Blob(['streamed']).stream())
    const chunks = []
    for await (const c of await vol.readFile('/stream.txt', { format: 'stream' })) chunks.push(Buffer.from(c))
    assert.equal(Buffer.concat(chunks).toString(), 'streamed')
    await vol.writeFile('/empty.txt', '')
    assert.equal(await vol.readFile('/empty.txt'), '')

    // An existing file is replaced only with force.
    await assert.rejects(vol.writeFile('/hello.txt', 'no', { force: false }), VolumeError)
    await vol.writeFile('/hello.txt', 'replaced', { force: true })
    assert.equal(await vol.readFile('/hello.txt'), 'replaced')

    stat = await vol.writeFile('/owned.txt', 'x', { uid: 1000, gid: 1000, mode: 0o600 })
    assert.deepEqual([stat.uid, stat.gid, stat.mode], [1000, 1000, 0o600])

    await assert.rejects(vol.makeDir('/a/b/c'), VolumePathNotFoundError)
    stat = await vol.makeDir('/a/b/c', { force: true })
    assert.equal(stat.type, VolumeFileType.DIRECTORY)
    assert.equal(stat.mode & 0o777, 0o755)
    await assert.rejects(vol.makeDir('/a/b/c', { force: false }), VolumeError)
    await vol.makeDir('/d', { uid: 1000, gid: 1000, mode: 0o750 })
    await vol.writeFile('/a/b/c/deep.txt', 'deep')

    const top = (await vol.list('/')).map((e) => e.name).sort()
    assert.deepEqual(top, ['a', 'bin.dat', 'd', 'empty.txt', 'hello.txt', 'owned.txt', 'stream.txt'])
    assert.ok(!top.includes('lost+found'))
    const deep = (await vol.list('/a', { depth: 3 })).map((e) => e.path)
    assert.deepEqual(deep, ['/a/b', '/a/b/c', '/a/b/c/deep.txt'])
    await assert.rejects(vol.list('/nope'), VolumePathNotFoundError)

    const dinfo = await vol.getInfo('/d')
    assert.deepEqual([dinfo.type, dinfo.uid, dinfo.gid, dinfo.mode & 0o777], [VolumeFileType.DIRECTORY, 1000, 1000, 0o750])
    assert.equal(await vol.exists('/hello.txt'), true)
    assert.equal(await vol.exists('/nope.txt'), false)
    await assert.rejects(vol.readFile('/nope.txt'), VolumePathNotFoundError)

    stat = await vol.updateMetadata('/hello.txt', { uid: 1001, gid: 1002, mode: 0o640 })
    assert.deepEqual([stat.uid, stat.gid, stat.mode], [1001, 1002, 0o640])
    await assert.rejects(vol.updateMetadata('/nope.txt', { mode: 0o644 }), VolumePathNotFoundError)

    await vol.remove('/hello.txt')
    assert.equal(await vol.exists('/hello.txt'), false)
    await vol.remove('/a')
    assert.equal(await vol.exists('/a/b/c/deep.txt'), false)
    await assert.rejects(vol.remove('/nope.txt'), VolumePathNotFoundError)

    // Paths stay in the volume: ".." stops at its root.
    await vol.writeFile('/../../escaped.txt', 'inside')
    assert.equal(await vol.readFile('/escaped.txt'), 'inside')
    await assert.rejects(vol.readFile('/../../../etc/passwd'), VolumePathNotFoundError)
  } finally {
    await Volume.destroy(vol.volumeId)
  }
})

test('volume content: a token opens its own volume only', async () => {
  const a = await Volume.create('vol-token-a')
  const b = await Volume.create('vol-token-b')
  const c = await Volume.create('vol-token-c', other)
  try {
    await a.writeFile('/secret.txt', 'a')
    // b's token (same tenant) and c's (another tenant) on a's volume.
    for (const token of [b.token, c.token, 'x'.repeat(64), '']) {
      const forged = new Volume(a.volumeId, a.name, token)
      await assert.rejects(forged.readFile('/secret.txt'), AuthenticationError)
      await assert.rejects(forged.writeFile('/x.txt', 'x'), AuthenticationError)
    }
    // A's API key is not a volume token.
    const keyed = new Volume(a.volumeId, a.name, process.env.E2B_API_KEY)
    await assert.rejects(keyed.readFile('/secret.txt'), AuthenticationError)
    assert.equal(await a.readFile('/secret.txt'), 'a')
  } finally {
    for (const v of [a, b]) await Volume.destroy(v.volumeId)
    await Volume.destroy(c.volumeId, other)
  }
})

test('volumes in sandboxes: volumeMounts', async () => {
  const vol = await Volume.create('vol-mounted')
  let sbx
  try {
    await assert.rejects(Sandbox.create({ timeoutMs: 60_000, volumeMounts: { '/mnt/data': 'no-such-volume' } }), /no-such-volume/)
    // Tenant b cannot mount a's volume by its name.
    await assert.rejects(Sandbox.create({ ...other, timeoutMs: 60_000, volumeMounts: { '/mnt/data': 'vol-mounted' } }), /vol-mounted/)
    sbx = await Sandbox.create({ timeoutMs: 60_000, volumeMounts: { '/mnt/data': vol } })
    const info = await Sandbox.getInfo(sbx.sandboxId)
    assert.deepEqual(info.volumeMounts, [{ name: 'vol-mounted', path: '/mnt/data' }])
    await sbx.commands.run('echo from-sandbox > /mnt/data/made.txt', { user: 'root' })
    assert.equal(await vol.readFile('/made.txt'), 'from-sandbox\n')
    await vol.writeFile('/given.txt', 'from-api')
    assert.equal((await sbx.commands.run('cat /mnt/data/given.txt', { user: 'root' })).stdout, 'from-api')
    // Not deleted while a sandbox uses it.
    await assert.rejects(Volume.destroy(vol.volumeId), VolumeError)
    await sbx.kill()
    sbx = undefined
  } finally {
    if (sbx) await sbx.kill()
    assert.equal(await Volume.destroy(vol.volumeId), true)
  }
})
