// E2B's secrets API through E2B's JavaScript SDK, unchanged. Run by
// TestE2BSDKSecrets (cmd/hutch/e2b_linux_test.go), which sets E2B_API_URL,
// E2B_SANDBOX_URL, E2B_API_KEY (tenant a) and HUTCH_E2B_OTHER_KEY (tenant b),
// and HUTCH_E2B_UPSTREAM, host:port of an HTTPS server on loopback that
// answers the headers it got as JSON (the Go test checks what it got).
import { test } from 'node:test'
import assert from 'node:assert/strict'
const { Sandbox, Secret, SecretNotFoundError, SecretError } = await import('e2b')

const other = { apiKey: process.env.HUTCH_E2B_OTHER_KEY }
const value = 'ghp_not-a-real-token-0123456789'

test('secrets: create, getInfo, list, update, exists, destroy; write-only; per tenant', async () => {
  const made = await Secret.create('GH_Token', value, { metadata: { team: 'a' } })
  assert.match(made.secretId, /^sec_/)
  assert.equal(made.name, 'gh_token')
  assert.equal(made.version, 1)
  assert.deepEqual(made.metadata, { team: 'a' })
  assert.ok(made.createdAt instanceof Date && !isNaN(made.createdAt))
  assert.ok(!JSON.stringify(made).includes(value))

  assert.equal((await Secret.getInfo('gh_token')).secretId, made.secretId)
  assert.equal((await Secret.getInfo(made.secretId)).name, 'gh_token')
  const updated = await Secret.update('gh_token', value + '-2')
  assert.equal(updated.version, 2)
  assert.ok(!JSON.stringify(updated).includes(value))

  await Secret.create('second', 'x')
  const names = []
  const pages = Secret.list({ limit: 1 })
  while (pages.hasNext) names.push(...(await pages.nextItems()).map((s) => s.name))
  assert.deepEqual(names, ['gh_token', 'second'])

  // Another tenant sees none of them, and cannot change or delete them.
  assert.equal(await Secret.exists('gh_token', other), false)
  await assert.rejects(Secret.getInfo(made.secretId, other), SecretNotFoundError)
  await assert.rejects(Secret.update(made.secretId, 'stolen', other), SecretNotFoundError)
  assert.equal(await Secret.destroy(made.secretId, other), false)
  const theirs = Secret.list(other)
  assert.deepEqual(await theirs.nextItems(), [])

  await assert.rejects(Secret.create('gh_token', 'again'), SecretError)
  await assert.rejects(Secret.create('sec_reserved', 'x'), SecretError)

  assert.equal(await Secret.destroy('GH_TOKEN'), true)
  assert.equal(await Secret.exists('gh_token'), false)
  assert.equal(await Secret.destroy('gh_token'), false)
  assert.equal(await Secret.destroy('second'), true)
})

const upstream = process.env.HUTCH_E2B_UPSTREAM

test('a network rule gives a sandbox a secret: the egress proxy sets the header, the sandbox sees only a placeholder', { skip: !upstream && 'HUTCH_E2B_UPSTREAM is not set' }, async () => {
  const real = 'sk-rule-real-value'
  await Secret.create('rule-token', real)
  await Secret.create('later-token', 'sk-later-value')
  const fill = (name) => typeof Secret.fill === 'function' ? Secret.fill(name) : `\${e2b.secrets.${name}}`
  const rules = { [upstream]: [{ transform: { headers: { Authorization: `Bearer ${fill('rule-token')}`, 'X-Plain': 'a$b' } } }] }

  // Another tenant cannot name a's secret.
  await assert.rejects(Sandbox.create({ ...other, network: { allowOut: [upstream], rules } }), /rule-token/)

  const sbx = await Sandbox.create({ network: { allowOut: [upstream], rules } })
  try {
    const placeholder = (await sbx.commands.run('printenv E2B_SECRET_RULE_TOKEN')).stdout.trim()
    assert.ok(placeholder.length > 0 && !placeholder.includes(real), placeholder)
    const headers = async () => {
      const r = await sbx.commands.run(`curl -sS --max-time 30 --noproxy '' https://${upstream}/`)
      assert.ok(!r.stdout.includes(real), `the sandbox read the secret's value: ${r.stdout}`)
      return JSON.parse(r.stdout)
    }
    const got = await headers()
    assert.deepEqual(got['X-Plain'], ['a$b'])
    // The upstream echoed the real value; the proxy gave the sandbox the
    // placeholder instead.
    assert.deepEqual(got.Authorization, [`Bearer ${placeholder}`])
    // The sandbox's own header of that name is replaced, not added to.
    const own = await sbx.commands.run(`curl -sS --max-time 30 --noproxy '' -H 'X-Plain: mine' https://${upstream}/`)
    assert.deepEqual(JSON.parse(own.stdout)['X-Plain'], ['a$b'])

    // A secret the sandbox was not given at create cannot come later.
    await assert.rejects(sbx.updateNetwork({ allowOut: [upstream], rules: { [upstream]: [{ transform: { headers: { 'X-Later': fill('later-token') } } }] } }), /E2B_SECRET_LATER_TOKEN|later-token/)
    // Rules taken away: the proxy sets nothing.
    await sbx.updateNetwork({ allowOut: [upstream] })
    const after = await headers()
    assert.equal(after.Authorization, undefined)
    assert.equal(after['X-Plain'], undefined)
  } finally {
    await sbx.kill()
    await Secret.destroy('rule-token')
    await Secret.destroy('later-token')
  }
})
