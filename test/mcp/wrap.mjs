// A client of `hutch mcp wrap`: MCP's TypeScript SDK (Client over
// StdioClientTransport) spawns hutch, which runs the server in a sandbox,
// and makes the calls it is told to. What it writes to the output file is
// for the Go test (cmd/hutch, TestMCPWrap*) to judge: the tools listed,
// each call's result as the client got it, every message the client
// received, and how the session ended.
//
// Usage: node wrap.mjs SPEC.json OUT.json
//
// SPEC: {"command": hutch, "args": [...], "cwd": dir, "env": {...},
//        "calls": [{"name": tool, "arguments": {...}}, ...]}
import { readFileSync, writeFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const [specFile, outFile] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(specFile, 'utf8'));

const transport = new StdioClientTransport({
  command: spec.command,
  args: spec.args,
  cwd: spec.cwd,
  env: spec.env,
  stderr: 'pipe',
});
let stderr = '';
transport.stderr.on('data', (b) => { stderr += b.toString(); });

// Every message the client receives, as it parsed it, before the SDK's
// own handler sees it.
const received = [];
let handler;
const spy = (msg, extra) => { received.push(JSON.stringify(msg)); handler(msg, extra); };
Object.defineProperty(transport, 'onmessage', {
  get: () => (handler ? spy : undefined),
  set: (h) => { handler = h; },
});

const out = { tools: [], calls: [], received, stderr: '' };
const client = new Client({ name: 'hutch-wrap-test', version: '1.0.0' });
try {
  await client.connect(transport);
  out.server = client.getServerVersion();
  out.tools = (await client.listTools()).tools.map((t) => t.name);
  for (const call of spec.calls) {
    try {
      const res = await client.callTool({ name: call.name, arguments: call.arguments });
      out.calls.push({
        name: call.name,
        isError: !!res.isError,
        text: (res.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n'),
      });
    } catch (e) {
      out.calls.push({ name: call.name, error: String(e?.message ?? e), code: e?.code });
    }
  }
  out.pid = transport.pid;
} catch (e) {
  out.failed = String(e?.stack ?? e);
} finally {
  const t0 = Date.now();
  await client.close();
  out.closeMS = Date.now() - t0;
  out.stderr = stderr;
  writeFileSync(outFile, JSON.stringify(out, null, 1));
}
