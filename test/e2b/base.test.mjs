// hutch's base image (scripts/base-image.sh) as E2B's template base,
// through E2B's JavaScript SDK, unchanged. Run by TestE2BSDKBaseImage
// (cmd/hutch/e2b_linux_test.go), which starts a daemon whose image store
// holds the image and sets E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
const { Sandbox } = await import('e2b')

const made = []
after(async () => {
  await Promise.all(made.map((id) => Sandbox.kill(id).catch(() => {})))
})

test('base: user with sudo, python, pip, git, curl, node', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  made.push(sbx.sandboxId)
  assert.equal((await sbx.getInfo()).templateId, 'base')

  const who = await sbx.commands.run('id -un; id -u; pwd; sudo id -un; sudo -u root id -u')
  assert.equal(who.stdout, 'user\n1000\n/home/user\nroot\n0\n')

  // E2B's own suite (commands/envVars.test.ts): a command's envs are its
  // own, and sudo resets the environment.
  const scoped = await sbx.commands.run('echo $FOO', { envs: { FOO: 'bar' } })
  assert.equal(scoped.stdout.trim(), 'bar')
  const next = await sbx.commands.run('sudo echo "$FOO"')
  assert.equal(next.exitCode, 0)
  assert.equal(next.stdout.trim(), '')
  // (SUDO_USER is the peer's user as the kernel reports it: gVisor's
  // SO_PEERCRED names root, so it is not compared here.)
  const reset = await sbx.commands.run('sudo sh -c \'echo "$HOME $USER $BAR"\'', { envs: { BAR: 'kept out' } })
  assert.equal(reset.stdout, '/root root \n')
  const kept = await sbx.commands.run('sudo -E sh -c \'echo "$BAR"\'', { envs: { BAR: 'kept' } })
  assert.equal(kept.stdout, 'kept\n')

  // Root through sudo is the sandbox's root and no more: no_new_privs
  // stays, and the bounding set is the sandbox root's (no CAP_SYS_ADMIN,
  // bit 21), as for a command run as root through the API.
  const st = await sbx.commands.run('sudo grep -E "^(NoNewPrivs|CapBnd)" /proc/self/status')
  const bnd = BigInt('0x' + st.stdout.match(/CapBnd:\s*([0-9a-f]+)/)[1])
  if (process.env.HUTCH_TIER !== 'microvm') {
    // (In a microVM the guest's root holds every capability of the
    // guest's own kernel: the VM is the boundary.)
    assert.match(st.stdout, /NoNewPrivs:\s*1/)
    assert.equal((bnd >> 21n) & 1n, 0n)
  }
  const api = await sbx.commands.run('grep CapBnd /proc/self/status', { user: 'root' })
  assert.equal(st.stdout.match(/CapBnd:.*/)[0], api.stdout.trim())
  // It writes where root may, in the sandbox only.
  await sbx.commands.run('sudo touch /etc/made-by-sudo && sudo chown user /etc/made-by-sudo')
  assert.equal((await sbx.commands.run('stat -c %U /etc/made-by-sudo')).stdout, 'user\n')

  // Exit codes, stdin and a missing command.
  const code = await sbx.commands.run('sudo sh -c "exit 3"').catch((e) => e)
  assert.equal(code.exitCode, 3)
  const missing = await sbx.commands.run('sudo no-such-command').catch((e) => e)
  assert.equal(missing.exitCode, 1)
  assert.match(missing.stderr, /no-such-command: command not found/)

  const tools = await sbx.commands.run('python --version && python3 -m pip --version && git --version && curl --version && node --version && gcc --version')
  assert.equal(tools.exitCode, 0)
  assert.match(tools.stdout, /^Python 3\./)
})

test('base: a pause keeps a process and its memory; connect resumes it', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  made.push(sbx.sandboxId)
  // A counter that lives in its shell's memory only, and answers when
  // asked, with its pid.
  await sbx.commands.run(`nohup sh -c 'i=0; while :; do i=$((i+1)); if [ -e /tmp/ask ]; then echo "$i $$" >/tmp/answer.new; mv /tmp/answer.new /tmp/answer; rm -f /tmp/ask; fi; sleep 0.05; done' >/dev/null 2>&1 &`)
  const ask = async (s) => {
    const r = await s.commands.run('rm -f /tmp/answer; touch /tmp/ask; while [ -e /tmp/ask ] || [ ! -e /tmp/answer ]; do sleep 0.05; done; cat /tmp/answer')
    const [count, pid] = r.stdout.trim().split(' ').map(Number)
    return { count, pid }
  }
  const before = await ask(sbx)
  await sbx.files.write('/home/user/kept.txt', 'kept\n')
  assert.equal(await sbx.pause(), true)
  assert.equal((await sbx.getInfo()).state, 'paused')
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
  const after = await ask(again)
  assert.equal(after.pid, before.pid, `the counter's process (tier ${process.env.HUTCH_TIER})`)
  assert.ok(after.count > before.count, `the count went on: ${before.count} then ${after.count}`)
  assert.equal(await again.files.read('/home/user/kept.txt'), 'kept\n')
})
