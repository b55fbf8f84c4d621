// hutch mcp's approvals through MCP's TypeScript SDK over stdio: a policy
// whose approvals ask about touch and deny rm. A client that declared
// elicitation is asked (the message names the command, the rule and the
// reason; the form has one field, answer: once, run, always or deny) and
// its answer decides; a client without elicitation is refused at once,
// with a message saying why. cmd/hutch's TestMCPStdioApprovals runs it
// with node's test runner and these variables:
//
//   HUTCH_BIN        the hutch binary
//   HUTCH_POLICY     the policy file (approvals: default allow, ask:
//                    [touch] on its line 4, deny: [rm] on its line 5)
//   HUTCH_WS         the workspace, which holds hello.txt
//   HUTCH_REPORT     the file hutch mcp's --report names
//   HUTCH_POLICY_NET a policy whose network allows example.com only and
//                    asks about other hosts (network.on_unknown: ask)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const env = (name) => {
  const v = process.env[name];
  assert.ok(v, `${name} is not set`);
  return v;
};
const bin = env('HUTCH_BIN');
const policy = env('HUTCH_POLICY');
const ws = env('HUTCH_WS');
const report = env('HUTCH_REPORT');
const policyNet = env('HUTCH_POLICY_NET');
const exists = (name) => fs.existsSync(path.join(ws, name));

// connect starts hutch mcp with the policy; elicit, when given, answers
// its elicitations (and declares the capability).
async function connect(t, elicit, extra = [], file = policy) {
  const transport = new StdioClientTransport({
    command: bin,
    args: ['mcp', '--policy', file, ...extra],
    cwd: ws,
    env: { PATH: process.env.PATH, HOME: process.env.HOME ?? '/root', LANG: 'C.UTF-8' },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr.on('data', (b) => { stderr += b; });
  const client = new Client({ name: 'hutch-approve-test', version: '1.0.0' }, elicit ? { capabilities: { elicitation: {} } } : {});
  if (elicit) client.setRequestHandler(ElicitRequestSchema, async (req) => elicit(req.params));
  await client.connect(transport);
  t.after(() => client.close());
  const call = async (a) => {
    const r = await client.callTool({ name: 'exec', arguments: a });
    return { ...r, text: r.content.map((c) => c.text ?? '').join('\n'), stderr: () => stderr };
  };
  return call;
}

test('hutch mcp asks a client that elicits', { timeout: 10 * 60 * 1000 }, async (t) => {
  const asked = [];
  let reply = null;
  const exec = await connect(t, async (params) => {
    asked.push(params);
    return reply;
  });
  const ran = async (command, extra = {}) => {
    const r = await exec({ command, ...extra });
    assert.ok(!r.isError, `${command}: ${r.text}`);
    return r.structuredContent;
  };
  const refused = async (command, pattern, extra = {}) => {
    const r = await exec({ command, ...extra });
    assert.equal(r.isError, true, `${command} was not refused: ${r.text}`);
    assert.match(r.text, pattern);
    return r.text;
  };

  await t.test('a command no rule asks about runs without a question', async () => {
    const r = await ran('echo hi; cat hello.txt');
    assert.equal(r.output, 'hi\nhello\n');
    assert.equal(asked.length, 0);
  });

  await t.test('answered once: the command runs, and the next one is asked again', async () => {
    reply = { action: 'accept', content: { answer: 'once' } };
    const r = await ran('touch once.txt && echo ran-once');
    assert.equal(r.output, 'ran-once\n');
    assert.ok(exists('once.txt'));
    assert.equal(asked.length, 1);
    const q = asked[0];
    assert.equal(q.mode ?? 'form', 'form');
    assert.match(q.message, /^Run this command in sandbox \S+\?/);
    assert.ok(q.message.includes('touch once.txt && echo ran-once'), q.message);
    assert.ok(q.message.includes('asked about: touch once.txt'), q.message);
    assert.ok(q.message.includes(`rule: ask: [touch] (${policy}:4)`), q.message);
    assert.match(q.message, /reason: /);
    assert.deepEqual(Object.keys(q.requestedSchema.properties), ['answer']);
    assert.deepEqual(q.requestedSchema.properties.answer.enum, ['once', 'run', 'always', 'deny']);
    assert.deepEqual(q.requestedSchema.required, ['answer']);
    await ran('touch once.txt');
    assert.equal(asked.length, 2);
  });

  await t.test('answered deny: the command never runs, and the result says why', async () => {
    reply = { action: 'accept', content: { answer: 'deny' } };
    const text = await refused('touch denied.txt', /command not approved: touch denied\.txt/);
    assert.match(text, /approvals\.approved: \["touch denied\.txt"\]/);
    assert.ok(!exists('denied.txt'), 'a denied command ran');
    assert.equal(asked.length, 3);
  });

  await t.test('declined or cancelled: not run', async () => {
    for (const action of ['decline', 'cancel']) {
      reply = { action };
      await refused(`touch ${action}.txt`, new RegExp(`not approved: touch ${action}\\.txt.*chose ${action}`));
      assert.ok(!exists(`${action}.txt`), `a ${action}d command ran`);
    }
  });

  await t.test('answered run: the same command runs again without a question', async () => {
    reply = { action: 'accept', content: { answer: 'run' } };
    const before = asked.length;
    await ran('touch run.txt');
    await ran('touch run.txt');
    assert.equal(asked.length, before + 1);
  });

  await t.test('a deny rule refuses without a question', async () => {
    const before = asked.length;
    await refused('rm -f hello.txt', /not approved: rm -f hello\.txt.*a deny rule cannot be answered/);
    assert.ok(exists('hello.txt'), 'a command a deny rule refuses ran');
    assert.equal(asked.length, before);
  });

  await t.test('a variable that changes what runs is asked about', async () => {
    reply = { action: 'accept', content: { answer: 'deny' } };
    const before = asked.length;
    await refused('echo hi > path.txt', /not approved/, { env: { PATH: '/tmp' } });
    assert.equal(asked.length, before + 1);
    assert.ok(asked.at(-1).message.includes("PATH=/tmp"), asked.at(-1).message);
    assert.ok(!exists('path.txt'));
  });
});

test('hutch mcp refuses at once where it cannot ask', { timeout: 10 * 60 * 1000 }, async (t) => {
  const exec = await connect(t, null, ['--report', report]);
  const r = await exec({ command: 'touch unasked.txt' });
  assert.equal(r.isError, true, `not refused: ${r.text}`);
  assert.match(r.text, /command not approved: touch unasked\.txt/);
  assert.match(r.text, /the MCP client cannot be asked: it did not declare the elicitation capability/);
  assert.match(r.text, /approvals\.approved: \["touch unasked\.txt"\] in the policy allows it/);
  assert.ok(!exists('unasked.txt'), 'a command no one approved ran');
  const ok = await exec({ command: 'echo still-fine' });
  assert.ok(!ok.isError, ok.text);
  assert.equal(ok.structuredContent.output, 'still-fine\n');
  const records = fs.readFileSync(report, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter((l) => l.action === 'approval');
  const refusal = records.find((x) => x.subject === 'touch unasked.txt');
  assert.ok(refusal, `the report has no record of the refusal: ${JSON.stringify(records)}`);
  assert.equal(refusal.decision, 'deny');
  assert.equal(refusal.by, 'nobody');
  assert.equal(refusal.rule, `ask: [touch] (${policy}:4)`);
});

test('hutch mcp asks the client about a host no rule allows', { timeout: 10 * 60 * 1000 }, async (t) => {
  const asked = [];
  const exec = await connect(t, async (params) => {
    asked.push(params);
    return { action: 'accept', content: { answer: 'deny' } };
  }, [], policyNet);
  // The proxy holds the connection while the client is asked; refused,
  // it answers 403, and the name was never looked up.
  const r = await exec({ command: "curl -s -m 120 -o /dev/null -w '%{http_code}' http://unknown.example/" });
  assert.ok(!r.isError, r.text);
  assert.equal(r.structuredContent.output, '403');
  const q = asked.find((x) => x.message.includes('unknown.example:80'));
  assert.ok(q, `not asked about unknown.example: ${JSON.stringify(asked)}`);
  assert.match(q.message, /^Let sandbox \S+ connect to unknown\.example:80\?/);
  assert.ok(q.message.includes('rule: network.on_unknown: ask'), q.message);
});
