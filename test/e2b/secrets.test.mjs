// E2B's secrets API through E2B's JavaScript SDK, unchanged. Run by
// TestE2BSDKSecrets (cmd/hutch/e2b_linux_test.go), which sets E2B_API_URL,
// E2B_SANDBOX_URL, E2B_API_KEY (tenant a) and HUTCH_E2B_OTHER_KEY (tenant b).
import { test } from 'node:test'
import assert from 'node:assert/strict'
const { Secret, SecretNotFoundError, SecretError } = await import('e2b')

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
