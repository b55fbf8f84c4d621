// hutch mcp through MCP's TypeScript SDK over stdio, as an agent's harness
// (Claude Code, Codex, Cursor) runs it: the SDK's StdioClientTransport
// spawns `hutch mcp FLAGS…` in a workspace, and every tool is called
// through the SDK's Client. cmd/hutch's TestMCPStdio runs it with node's
// test runner and these variables:
//
//   HUTCH_BIN        the hutch binary
//   HUTCH_MCP_ARGS   hutch mcp's flags, a JSON array; they must allow
//                    example.com and deny-read HUTCH_DENIED
//   HUTCH_WS         the workspace (hutch mcp's working directory), which
//                    holds hello.txt saying "hello from the workspace"
//   HUTCH_OUTSIDE    a directory of the host outside the workspace that
//                    the host's user may write
//   HUTCH_DENIED     a file outside the workspace holding HUTCH_SECRET
//   HUTCH_SECRET     its content
//   HUTCH_REPORT     the file hutch mcp's --report names
//   HUTCH_TIMEOUT_S  hutch mcp's --timeout, in seconds
//
// Nothing leaves this machine: the sandboxes' one allowed host is never
// contacted, and the servers reached are on loopback.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const env = (name) => {
  const v = process.env[name];
  assert.ok(v, `${name} is not set`);
  return v;
};
const bin = env('HUTCH_BIN');
const args = JSON.parse(env('HUTCH_MCP_ARGS'));
const ws = env('HUTCH_WS');
const outside = env('HUTCH_OUTSIDE');
const denied = env('HUTCH_DENIED');
const secret = env('HUTCH_SECRET');
const report = env('HUTCH_REPORT');
const timeoutS = Number(env('HUTCH_TIMEOUT_S'));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// eventually polls cond (async) until it is true, for up to ms; it is a
// guard against a hang, not a time the test expects.
async function eventually(what, ms, cond) {
  const end = Date.now() + ms;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) assert.fail(`${what}: not within ${ms / 1000} s`);
    await sleep(100);
  }
}

// processTree returns the processes below pid (itself included), each
// as "pid:starttime", from /proc: the sandboxes' processes are children
// of hutch on the host.
function processTree(pid) {
  const kids = new Map();
  const start = new Map();
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    let stat;
    try {
      stat = fs.readFileSync(`/proc/${e}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ppid = Number(f[1]);
    start.set(Number(e), f[19]);
    if (!kids.has(ppid)) kids.set(ppid, []);
    kids.get(ppid).push(Number(e));
  }
  const out = [];
  const todo = [pid];
  while (todo.length) {
    const p = todo.pop();
    if (start.has(p)) out.push(`${p}:${start.get(p)}`);
    todo.push(...(kids.get(p) ?? []));
  }
  return out;
}

function alive(entry) {
  const [pid, st] = entry.split(':');
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] === st;
  } catch {
    return false;
  }
}

test('hutch mcp over stdio', { timeout: 10 * 60 * 1000 }, async (t) => {
  const transport = new StdioClientTransport({
    command: bin,
    args: ['mcp', ...args],
    cwd: ws,
    env: { PATH: process.env.PATH, HOME: process.env.HOME ?? '/root', LANG: 'C.UTF-8' },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr.on('data', (b) => { stderr += b; });
  const client = new Client({ name: 'hutch-stdio-test', version: '1.0.0' });
  await client.connect(transport);
  // The process, to see how it exits (the SDK keeps it to itself).
  const proc = transport._process;
  const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
  t.after(() => client.close());

  const call = async (name, a = {}, opts = {}) => client.callTool({ name, arguments: a }, undefined, opts);
  const ok = async (name, a) => {
    const r = await call(name, a);
    assert.ok(!r.isError, `${name} ${JSON.stringify(a).slice(0, 200)}: ${JSON.stringify(r.content).slice(0, 2000)}`);
    return r.structuredContent;
  };
  const refused = async (name, a, pattern) => {
    const r = await call(name, a);
    assert.equal(r.isError, true, `${name} ${JSON.stringify(a)} was not refused: ${JSON.stringify(r.content)}`);
    const text = r.content.map((c) => c.text ?? '').join('\n');
    if (pattern) assert.match(text, pattern);
    return text;
  };
  const sh = async (command, extra = {}) => ok('exec', { command, ...extra });

  await t.test('initialize and list the tools', async () => {
    assert.equal(client.getServerVersion().name, 'hutch');
    const { tools } = await client.listTools();
    const names = tools.map((x) => x.name).sort();
    assert.deepEqual(names, ['exec', 'exec_kill', 'exec_poll', 'file_edit', 'file_list', 'file_read', 'file_write',
      'port_url', 'sandbox_create', 'sandbox_info', 'sandbox_kill', 'sandbox_list']);
    for (const tool of tools) {
      assert.equal(tool.inputSchema.type, 'object', `${tool.name}'s input schema`);
      assert.ok(tool.description.length > 20, `${tool.name} has no description for a model`);
    }
    const byName = Object.fromEntries(tools.map((x) => [x.name, x]));
    assert.equal(byName.sandbox_list.annotations?.readOnlyHint, true);
    assert.equal(byName.sandbox_kill.annotations?.destructiveHint, true);
    for (const a of ['command', 'cwd', 'env', 'timeout_s', 'yield_ms', 'pty', 'sandbox_id']) {
      assert.ok(a in byName.exec.inputSchema.properties, `exec takes ${a}`);
    }
  });

  let session;
  await t.test('exec in the session sandbox sees the workspace, and nothing else is writable', async () => {
    const r = await sh('cat hello.txt; pwd');
    assert.equal(r.exit_code, 0);
    assert.equal(r.output, `hello from the workspace\n${ws}\n`);
    const info = await ok('sandbox_info', {});
    session = info.sandbox_id;
    assert.equal(info.workspace, ws);
    assert.equal(info.state, 'running');

    const w = await sh(`echo made > made-by-sandbox.txt && echo escaped > ${outside}/escaped.txt`);
    assert.notEqual(w.exit_code, 0, `a write outside the workspace succeeded: ${w.output}`);
    assert.equal(fs.readFileSync(path.join(ws, 'made-by-sandbox.txt'), 'utf8'), 'made\n');
    assert.ok(!fs.existsSync(path.join(outside, 'escaped.txt')), 'the sandbox wrote outside its workspace');
  });

  await t.test('a denied path cannot be read', async () => {
    const r = await sh(`cat ${denied}`);
    assert.notEqual(r.exit_code, 0);
    assert.ok(!r.output.includes(secret), 'exec read the denied file');
    const text = await refused('file_read', { path: denied });
    assert.ok(!text.includes(secret), 'file_read read the denied file');
  });

  await t.test('the file tools', async () => {
    const w = await ok('file_write', { path: 'notes/todo.txt', content: 'one\ntwo\nthree\n' });
    assert.equal(w.bytes, 14);
    assert.equal(fs.readFileSync(path.join(ws, 'notes/todo.txt'), 'utf8'), 'one\ntwo\nthree\n');
    const r = await ok('file_read', { path: 'notes/todo.txt', offset: 2, limit: 1 });
    assert.equal(r.kind, 'text');
    assert.equal(r.content, 'two\n');
    const e = await ok('file_edit', { path: 'notes/todo.txt', old_string: 'two', new_string: 'TWO' });
    assert.equal(e.replacements, 1);
    await refused('file_edit', { path: 'notes/todo.txt', old_string: 'absent', new_string: 'x' });
    assert.equal(fs.readFileSync(path.join(ws, 'notes/todo.txt'), 'utf8'), 'one\nTWO\nthree\n');
    const l = await ok('file_list', { path: '.', depth: 2 });
    const paths = l.entries.map((x) => x.path);
    for (const p of ['hello.txt', 'notes', 'notes/todo.txt']) assert.ok(paths.includes(p), `file_list lacks ${p}: ${paths}`);
    await refused('file_write', { path: `${outside}/written.txt`, content: 'x' });
    assert.ok(!fs.existsSync(path.join(outside, 'written.txt')), 'file_write wrote outside the workspace');
  });

  await t.test('a 10-minute command answers with a session within its yield, is polled and killed', async () => {
    const r = await sh('echo started $$; exec sleep 600', { yield_ms: 1000 });
    assert.equal(r.running, true);
    assert.ok(r.session_id, 'no session id');
    assert.equal(r.exit_code, undefined);
    const pid = r.pid;
    assert.match(r.output, /^started \d+\n$/);
    const p = await ok('exec_poll', { session_id: r.session_id, yield_ms: 200 });
    assert.equal(p.running, true);
    const k = await ok('exec_kill', { session_id: r.session_id });
    assert.equal(k.running, false);
    assert.equal(k.killed, true);
    await eventually('the killed command ends', 30000, async () =>
      (await sh(`kill -0 ${pid} 2>/dev/null && echo alive || echo gone`)).output === 'gone\n');
    await refused('exec_poll', { session_id: r.session_id });
  });

  await t.test('a cancelled call kills its command', async () => {
    const ac = new AbortController();
    const pending = call('exec', { command: 'echo $$ > cancel.pid; exec sleep 600', yield_ms: 300000 }, { signal: ac.signal });
    await eventually('the command starts', 60000, async () => fs.existsSync(path.join(ws, 'cancel.pid')));
    const pid = fs.readFileSync(path.join(ws, 'cancel.pid'), 'utf8').trim();
    ac.abort();
    await assert.rejects(pending);
    await eventually('the cancelled command ends', 30000, async () =>
      (await sh(`kill -0 ${pid} 2>/dev/null && echo alive || echo gone`)).output === 'gone\n');
  });

  await t.test('a 10 MiB binary file round trip, byte for byte', async () => {
    const data = crypto.randomBytes(10 << 20);
    const w = await ok('file_write', { path: 'blob.bin', content: data.toString('base64'), encoding: 'base64' });
    assert.equal(w.bytes, data.length);
    assert.ok(fs.readFileSync(path.join(ws, 'blob.bin')).equals(data), 'the file on the host differs');
    const r = await ok('file_read', { path: 'blob.bin' });
    assert.equal(r.kind, 'binary');
    assert.equal(r.size, data.length);
    assert.match(r.url, /^http:\/\/127\.0\.0\.1:\d+\/links\/[0-9a-f]+$/);
    const resp = await fetch(r.url);
    assert.equal(resp.status, 200);
    const got = Buffer.from(await resp.arrayBuffer());
    assert.ok(got.equals(data), `the link's bytes differ (${got.length} bytes)`);
    const sum = await sh('sha256sum blob.bin');
    assert.equal(sum.output.split(' ')[0], crypto.createHash('sha256').update(data).digest('hex'));
  });

  await t.test('port_url reaches a server inside the sandbox', async () => {
    fs.mkdirSync(path.join(ws, 'www'), { recursive: true });
    fs.writeFileSync(path.join(ws, 'www', 'index.html'), 'served from inside\n');
    const server = fs.existsSync('/usr/bin/python3')
      ? 'exec /usr/bin/python3 -m http.server --bind 127.0.0.1 8765'
      : 'exec /usr/bin/busybox httpd -f -p 127.0.0.1:8765';
    const r = await sh(server, { cwd: 'www', yield_ms: 100 });
    assert.equal(r.running, true, `the server did not start: ${r.output}`);
    const u = await ok('port_url', { port: 8765 });
    assert.match(u.url, /^http:\/\/127\.0\.0\.1:\d+\/$/);
    let body = '';
    await eventually('the server answers through the URL', 60000, async () => {
      try {
        const resp = await fetch(u.url + 'index.html');
        body = await resp.text();
        return resp.status === 200;
      } catch {
        return false;
      }
    });
    assert.equal(body, 'served from inside\n');
    assert.equal((await ok('port_url', { port: 8765 })).url, u.url, 'the same port, another URL');
    await ok('exec_kill', { session_id: r.session_id });
  });

  await t.test('sandbox_create within the flags, and refused beyond them', async () => {
    await refused('sandbox_create', { allow_domains: ['other.test'] }, /other\.test.*not allowed/);
    await refused('sandbox_create', { allow_domains: ['*.example.com'] }, /not allowed/);
    await refused('sandbox_create', { image: 'alpine:3' }, /image/);
    await refused('sandbox_create', { timeout_s: timeoutS + 1 }, /timeout/);
    const sb = await ok('sandbox_create', { allow_domains: ['example.com'], timeout_s: timeoutS });
    assert.ok(sb.sandbox_id && sb.sandbox_id !== session);
    assert.notEqual(sb.workspace, ws);
    // Its own workspace, empty but for hutch's stand-ins (the protected
    // names, read-only and empty).
    const ls = await sh('find . -mindepth 1 ! -empty; pwd', { sandbox_id: sb.sandbox_id });
    assert.equal(ls.output, `${sb.workspace}\n`);
    await sh('echo mine > own.txt', { sandbox_id: sb.sandbox_id });
    assert.ok(!fs.existsSync(path.join(ws, 'own.txt')), 'a created sandbox wrote the session\'s workspace');
    const list = await ok('sandbox_list', {});
    assert.deepEqual(list.sandboxes.map((x) => x.sandbox_id).sort(), [session, sb.sandbox_id].sort());
    const info = await ok('sandbox_info', { sandbox_id: sb.sandbox_id });
    assert.ok(info.expires_at, 'no expiry');
    await ok('sandbox_kill', { sandbox_id: sb.sandbox_id });
    assert.deepEqual((await ok('sandbox_list', {})).sandboxes.map((x) => x.sandbox_id), [session]);
    assert.ok(!fs.existsSync(sb.workspace), 'the killed sandbox\'s workspace is still there');
    await refused('exec', { command: 'true', sandbox_id: sb.sandbox_id });
  });

  await t.test('the session sandbox killed, the next call starts a fresh one', async () => {
    await sh('curl -s -o /dev/null http://blocked.test/ ; true'); // a refusal for the report
    await ok('sandbox_kill', {});
    const r = await sh('cat hello.txt');
    assert.equal(r.output, 'hello from the workspace\n');
    const info = await ok('sandbox_info', {});
    assert.notEqual(info.sandbox_id, session);
    session = info.sandbox_id;
  });

  await t.test('closing the client ends every sandbox', async () => {
    const extra = await ok('sandbox_create', {});
    const bg = await sh('sleep 600', { sandbox_id: extra.sandbox_id, yield_ms: 100 });
    assert.equal(bg.running, true);
    const tree = processTree(transport.pid).filter((e) => !e.startsWith(`${transport.pid}:`));
    assert.ok(tree.length >= 3, `the sandboxes' processes are not below hutch: ${tree}`);
    await client.close();
    const { code, signal } = await exited;
    assert.equal(signal, null, `hutch mcp was killed by ${signal}:\n${stderr}`);
    assert.equal(code, 0, `hutch mcp exited with ${code}:\n${stderr}`);
    const left = tree.filter(alive);
    assert.deepEqual(left, [], 'processes left behind');
    assert.ok(!fs.existsSync(extra.workspace), 'a created sandbox\'s workspace is left behind');
    const lines = fs.readFileSync(report, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.ok(lines.some((l) => l.action === 'blocked' && l.host === 'blocked.test'), `the report lacks the refusal: ${JSON.stringify(lines)}`);
  });
});
