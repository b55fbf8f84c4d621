// hutch's driver of one JavaScript or TypeScript context: node runs this
// file with its configuration (JSON) as its only argument. It reads
// commands from fd 3 and writes events to fd 4, one JSON object a line
// ({"id":N,"t":TYPE,...}, id and t first). See internal/interp/node.go.
'use strict';

const fs = require('fs');
const net = require('net');
const path = require('path');
const util = require('util');
const vm = require('vm');
const Module = require('module');
const { AsyncLocalStorage } = require('async_hooks');
const { StringDecoder } = require('string_decoder');
const { pathToFileURL } = require('url');

// What the driver uses, kept before any cell can replace it.
const stringify = JSON.stringify;
const parse = JSON.parse;
const inspect = util.inspect;
const isNativeError = util.types.isNativeError;

const config = parse(process.argv[2] || '{}');
process.argv = [process.argv[0]];

// reopen gives the protocol descriptors close-on-exec (libuv opens with
// O_CLOEXEC), so that no process a cell starts holds them.
function reopen(fd, flags) {
  try {
    const n = fs.openSync('/proc/self/fd/' + fd, flags);
    fs.closeSync(fd);
    return n;
  } catch {
    return fd;
  }
}
const commandFd = reopen(3, 'r');
const eventFd = reopen(4, 'w');

// send writes one event, synchronously: output reaches hutch in order and
// before the cell goes on, and a reader that is behind slows the cell.
const pause = new Int32Array(new SharedArrayBuffer(4));
function send(event) {
  const buf = Buffer.from(stringify(event) + '\n');
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(eventFd, buf, off, buf.length - off);
    } catch (e) {
      if (e.code !== 'EAGAIN') {
        process.exit(70); // hutch is gone
      }
      Atomics.wait(pause, 0, 0, 1);
    }
  }
}

function log(text) {
  send({ id: 0, t: 'log', text: String(text) });
}

// The execution a piece of code runs for: set around a cell, inherited by
// everything it schedules, so late output is told from the next cell's.
const cells = new AsyncLocalStorage();
let running = null; // the execution under way: {id, interrupt}

// Output. Each write is sent at once, tagged with its execution; a long
// text goes in pieces of at most chunk characters.
const chunk = 1 << 20;
function emit(name, text) {
  const id = cells.getStore() || 0;
  for (let i = 0; i < text.length; ) {
    let j = Math.min(i + chunk, text.length);
    const c = text.charCodeAt(j - 1);
    if (j < text.length && c >= 0xd800 && c <= 0xdbff) {
      j--; // keep a surrogate pair together
    }
    send({ id, t: 'stream', name, text: text.slice(i, j) });
    i = j;
  }
}

function capture(stream, name) {
  const decoder = new StringDecoder('utf8');
  stream.write = function write(data, encoding, cb) {
    if (typeof encoding === 'function') {
      cb = encoding;
      encoding = undefined;
    }
    let text;
    if (typeof data === 'string') {
      text = encoding && encoding !== 'utf8' && encoding !== 'utf-8' ? Buffer.from(data, encoding).toString('utf8') : data;
    } else if (ArrayBuffer.isView(data)) {
      text = decoder.write(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
    } else {
      throw new TypeError('The "chunk" argument must be of type string or an instance of Buffer or Uint8Array');
    }
    if (text) {
      emit(name, text);
    }
    if (typeof cb === 'function') {
      process.nextTick(cb);
    }
    return true;
  };
}
capture(process.stdout, 'stdout');
capture(process.stderr, 'stderr');

// Errors after a cell (a callback's, a rejection nobody handled) are
// reported on stderr, of the execution under way if any, and never end the
// context.
function background(kind, e) {
  const text = 'Uncaught ' + kind + ': ' + (isNativeError(e) && e.stack ? e.stack : inspect(e)) + '\n';
  const id = running ? running.id : 0;
  if (id) {
    cells.run(id, () => emit('stderr', text));
  } else {
    log(text);
  }
}
process.on('uncaughtException', (e) => background('exception', e));
process.on('unhandledRejection', (e) => background('rejection', e));

// Interrupts. An interrupt command names its execution: one that awaits is
// abandoned; one that came before its execution started stops it as it
// starts (stopAt). A cell's synchronous part cannot read commands: hutch
// also sends SIGINT, which vm's breakOnSigint turns into an exception
// through node's SIGINT watchdog, a thread woken by the signal.
//
// node starts that thread for each breakOnSigint run and stops it after,
// and a SIGINT that came as a run ended (a cell waiting for a process that
// the same SIGINT ended) outlives it: the thread, woken by the signal once
// it was already stopping, takes the wake-up for its stop and leaves its
// stop's own behind, which the next run's thread takes for a SIGINT and
// breaks a later cell. So the watchdog is started once for the driver's
// life (the binding node's REPL uses), a SIGINT that comes while no cell
// runs reaches none, and SIGINT's handler stays node's watchdog's (no
// instant, between handlers, where SIGINT ends node). A SIGINT node took
// late (its thread not yet run) could still reach the next cell: before a
// cell that follows an interrupt, settle waits until node holds none.
let stopAt = 0; // the last execution an interrupt command named
let settledAt = 0; // stopAt when the last settle ran
const watchdog = startWatchdog();

function startWatchdog() {
  let binding;
  try {
    binding = process.binding('contextify');
  } catch {
    return null;
  }
  if (!binding || typeof binding.startSigintWatchdog !== 'function') {
    return null;
  }
  const before = new Set(threads());
  if (!binding.startSigintWatchdog()) {
    return null;
  }
  const added = threads().filter((t) => !before.has(t));
  return { thread: added.length === 1 ? added[0] : '' };
}

function threads() {
  try {
    return fs.readdirSync('/proc/self/task');
  } catch {
    return [];
  }
}

if (watchdog) {
  // A listener would put libuv's handler in the watchdog's place (and
  // breakOnSigint, removing it for a cell, node's default: death). SIGINT
  // is the engine's: a cell's listeners of it are not added.
  for (const m of ['on', 'addListener', 'prependListener', 'once', 'prependOnceListener']) {
    const add = process[m];
    Object.defineProperty(process, m, {
      value: function (event, listener) {
        return event === 'SIGINT' ? this : add.call(this, event, listener);
      },
      writable: true,
      configurable: true,
      enumerable: false,
    });
  }
} else {
  // Without it, node dies of a SIGINT no listener takes.
  log('no persistent SIGINT watchdog (process.binding("contextify")): a SIGINT that comes as a cell ends may reach a later one');
  process.on('SIGINT', () => {});
}

// settle returns once no SIGINT sent for an interrupted cell can reach
// the next one: none is pending, and the watchdog's thread waits (it took
// every one). It runs as a breakOnSigint script of its own, so that a
// SIGINT the watchdog takes meanwhile breaks it, not a cell. Without the
// watchdog's thread known (or /proc), it lets node's threads run a while.
const settleWait = 2000; // ms, at most
const settleBlind = 50; // ms, when node cannot be read
const pause1ms = () => Atomics.wait(pause, 0, 0, 1);
let settleUntil = 0;
let settleFrom = 0;
Object.defineProperty(globalThis, '__hutchSettled', {
  value: () => {
    for (;;) {
      const now = Date.now();
      if (now >= settleUntil || quiet(now)) {
        return;
      }
      pause1ms();
    }
  },
  writable: false,
  configurable: false,
  enumerable: false,
});
const settleScript = new vm.Script('__hutchSettled()', { filename: 'settle' });

function quiet(now) {
  if (!watchdog || !watchdog.thread) {
    return now >= settleFrom + settleBlind;
  }
  try {
    // (gVisor shows no ShdPnd: there, the thread's state only.)
    const pending = /^ShdPnd:\s*([0-9a-f]+)/m.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    if (pending && (parseInt(pending[1].slice(-1), 16) & 2) !== 0) { // SIGINT is signal 2
      return false;
    }
    const stat = fs.readFileSync('/proc/self/task/' + watchdog.thread + '/stat', 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'S';
  } catch {
    return now >= settleFrom + settleBlind;
  }
}

function settle() {
  settleFrom = Date.now();
  settleUntil = settleFrom + settleWait;
  for (;;) {
    try {
      settleScript.runInThisContext({ breakOnSigint: true });
      break;
    } catch (e) {
      // A late SIGINT, taken here instead of in a cell: again.
      if (!(e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') || Date.now() >= settleUntil) {
        break;
      }
    }
  }
  if (Date.now() >= settleUntil) {
    log('SIGINT not settled in ' + settleWait + ' ms');
  }
}

class Interrupted extends Error {}

// TypeScript: where hutch says, else Debian's node-typescript, else one on
// node's own paths.
let ts = null;
let tsMissing = '';
for (const where of config.typescriptModule ? [config.typescriptModule] : ['/usr/share/nodejs/typescript', 'typescript']) {
  try {
    ts = require(where);
    break;
  } catch (e) {
    tsMissing = e.message;
  }
}
const needTS = 'node-typescript is not installed (apt-get install node-typescript)';

// The cells' module scope: require resolves from the working directory.
const base = path.join(process.cwd(), '<cell>');
const cellModule = new Module(base);
cellModule.filename = base;
cellModule.paths = Module._nodeModulePaths(process.cwd());
const cellRequire = Module.createRequire(base);
function define(name, value, hidden) {
  Object.defineProperty(globalThis, name, { value, writable: !hidden, configurable: true, enumerable: false });
}
define('require', cellRequire);
define('module', cellModule);
define('exports', cellModule.exports);
define('__hutch', Object.freeze({
  require: cellRequire,
  default: (m) => (m && m.__esModule ? m.default : m),
  // import() of a cell: from the working directory too (a file, or a
  // package require can resolve).
  import: async (specifier) => {
    let target = String(specifier);
    if (!Module.builtinModules.includes(target.replace(/^node:/, ''))) {
      try {
        target = pathToFileURL(cellRequire.resolve(target)).href;
      } catch {
        // left to import() itself
      }
    }
    return import(target);
  },
}), true);

// compile turns a cell into a script to run in the global context:
// top-level declarations become assignments to global variables (so a
// later cell may declare the same name again), imports become require
// calls (and import() calls __hutch.import), and a cell with top-level
// await runs as an async function. It returns {source, async}; the
// script's value (or its promise's) is the cell's.
function compile(code, file) {
  if (!ts) {
    if (config.typescript) {
      throw new Error('TypeScript needs ' + needTS + ': ' + tsMissing);
    }
    return { source: code, async: false, plain: true };
  }
  if (config.typescript) {
    const out = ts.transpileModule(code, {
      fileName: file + '.ts',
      reportDiagnostics: true,
      compilerOptions: {
        module: ts.ModuleKind.ESNext,
        target: ts.ScriptTarget.ES2022,
        isolatedModules: true,
        preserveValueImports: true,
        sourceMap: false,
        removeComments: false,
      },
    });
    const bad = (out.diagnostics || []).find((d) => d.category === ts.DiagnosticCategory.Error);
    if (bad) {
      throw syntaxError(bad, file);
    }
    code = out.outputText;
  }
  let sf = parseCell(code, file);
  const trimmed = code.trim();
  if (trimmed.startsWith('{') && !trimmed.endsWith(';')) {
    // As node's REPL: a cell that reads as an object literal is one.
    const wrapped = parseCell('(' + code + '\n)', file);
    if (wrapped.parseDiagnostics.length === 0 && wrapped.statements.length === 1) {
      code = '(' + code + '\n)';
      sf = wrapped;
    }
  }
  if (sf.parseDiagnostics.length > 0) {
    throw syntaxError(sf.parseDiagnostics[0], file);
  }
  return rewrite(code, sf);
}

function parseCell(code, file) {
  return ts.createSourceFile(file + '.js', code, ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
}

function syntaxError(d, file) {
  const e = new SyntaxError(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
  if (d.file && d.start !== undefined) {
    const { line, character } = d.file.getLineAndCharacterOfPosition(d.start);
    const text = d.file.text.split('\n')[line] || '';
    e.stack = file + ':' + (line + 1) + ':' + (character + 1) + '\n' + text + '\n' + ' '.repeat(character) + '^\n\n' +
      'SyntaxError: ' + e.message;
  } else {
    e.stack = 'SyntaxError: ' + e.message;
  }
  return e;
}

function rewrite(code, sf) {
  const edits = []; // {pos, end, text}, applied back to front
  const hoisted = new Set();
  const edit = (pos, end, text) => edits.push({ pos, end, text });
  const isAsync = hasTopLevelAwait(sf);
  const names = (n) => {
    if (ts.isIdentifier(n)) {
      hoisted.add(n.text);
    } else if (ts.isObjectBindingPattern(n) || ts.isArrayBindingPattern(n)) {
      for (const el of n.elements) {
        if (!ts.isOmittedExpression(el)) {
          names(el.name);
        }
      }
    }
  };
  const stmts = sf.statements;
  for (const s of stmts) {
    const start = s.getStart(sf);
    if (ts.isVariableStatement(s)) {
      const list = s.declarationList;
      const isVar = (list.flags & (ts.NodeFlags.Let | ts.NodeFlags.Const)) === 0;
      edit(start, list.declarations[0].getStart(sf), 'void (');
      for (const d of list.declarations) {
        names(d.name);
        if (!d.initializer) {
          edit(d.getStart(sf), d.end, isVar ? 'void 0' : d.name.getText(sf) + ' = void 0');
        }
      }
      edit(list.end, list.end, ')');
    } else if (ts.isFunctionDeclaration(s) && s.name) {
      dropModifiers(s, sf, edit);
      if (isAsync) {
        edit(start, start, 'this.' + s.name.text + ' = ' + s.name.text + '; ');
      }
    } else if (ts.isClassDeclaration(s) && s.name) {
      hoisted.add(s.name.text);
      const at = dropModifiers(s, sf, edit);
      edit(at, at, 'void (' + s.name.text + ' = ');
      edit(s.end, s.end, ')');
    } else if (ts.isImportDeclaration(s)) {
      edit(start, s.end, importText(s, sf, hoisted));
    } else if (ts.isExportDeclaration(s)) {
      edit(start, s.end, '');
    } else if (ts.isExportAssignment(s)) {
      edit(start, s.expression.getStart(sf), '');
    }
  }
  const visit = (n) => {
    if (ts.isCallExpression(n) && n.expression.kind === ts.SyntaxKind.ImportKeyword) {
      edit(n.expression.getStart(sf), n.expression.end, '__hutch.import');
    }
    ts.forEachChild(n, visit);
  };
  ts.forEachChild(sf, visit);
  const last = stmts[stmts.length - 1];
  let tail = '';
  if (last && ts.isExpressionStatement(last)) {
    if (isAsync) {
      edit(last.expression.getStart(sf), last.expression.getStart(sf), 'return (');
      edit(last.expression.end, last.expression.end, ')');
    }
  } else if (!isAsync) {
    tail = '\n;void 0';
  }
  edits.sort((a, b) => b.pos - a.pos || b.end - a.end);
  let body = code;
  for (const e of edits) {
    body = body.slice(0, e.pos) + e.text + body.slice(e.end);
  }
  let head = hoisted.size > 0 ? 'var ' + [...hoisted].join(', ') + '; ' : '';
  if (isAsync) {
    return { source: head + '(async () => { ' + body + '\n})()', async: true };
  }
  return { source: head + body + tail, async: false };
}

// dropModifiers removes export, default and declare from a declaration and
// returns where what remains starts.
function dropModifiers(s, sf, edit) {
  let at = s.getStart(sf);
  for (const m of s.modifiers || []) {
    if (m.kind === ts.SyntaxKind.ExportKeyword || m.kind === ts.SyntaxKind.DefaultKeyword ||
        m.kind === ts.SyntaxKind.DeclareKeyword) {
      edit(m.getStart(sf), m.end, '');
      at = Math.max(at, m.end);
    }
  }
  return at;
}

function importText(s, sf, hoisted) {
  const from = '__hutch.require(' + s.moduleSpecifier.getText(sf) + ')';
  const c = s.importClause;
  if (!c) {
    return 'void ' + from + ';';
  }
  if (c.isTypeOnly) {
    return '';
  }
  const parts = [];
  if (c.name) {
    hoisted.add(c.name.text);
    parts.push(c.name.text + ' = __hutch.default(' + from + ')');
  }
  const b = c.namedBindings;
  if (b && ts.isNamespaceImport(b)) {
    hoisted.add(b.name.text);
    parts.push(b.name.text + ' = ' + from);
  } else if (b && ts.isNamedImports(b)) {
    const props = [];
    for (const el of b.elements) {
      if (el.isTypeOnly) {
        continue;
      }
      hoisted.add(el.name.text);
      props.push(el.propertyName ? el.propertyName.getText(sf) + ': ' + el.name.text : el.name.text);
    }
    if (props.length > 0) {
      parts.push('{' + props.join(', ') + '} = ' + from);
    }
  }
  return parts.length > 0 ? 'void (' + parts.join(', ') + ');' : '';
}

// hasTopLevelAwait reports an await (or for await) outside any function.
function hasTopLevelAwait(sf) {
  let found = false;
  const visit = (n) => {
    if (found) {
      return;
    }
    if (ts.isAwaitExpression(n) || (ts.isForOfStatement(n) && n.awaitModifier)) {
      found = true;
      return;
    }
    if (ts.isFunctionLike(n) || ts.isClassStaticBlockDeclaration(n) || ts.isPropertyDeclaration(n)) {
      return;
    }
    ts.forEachChild(n, visit);
  };
  ts.forEachChild(sf, visit);
  return found;
}

// describe turns what a cell threw into an error event's fields.
function describe(e, file) {
  if (e instanceof Interrupted || (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED')) {
    return { name: 'Interrupted', value: 'the execution was interrupted', traceback: ['Interrupted: the execution was interrupted'] };
  }
  if (isNativeError(e) || e instanceof Error) {
    let name = 'Error';
    let value = '';
    try {
      name = String(e.name || (e.constructor && e.constructor.name) || 'Error');
      value = e.message === undefined ? '' : String(e.message);
    } catch {
      // a getter that throws: keep the defaults
    }
    let stack = typeof e.stack === 'string' ? e.stack : name + ': ' + value;
    return { name, value, traceback: cleanStack(stack, file) };
  }
  let shown;
  try {
    shown = typeof e === 'string' ? e : inspect(e);
  } catch {
    shown = String(typeof e);
  }
  return { name: 'Error', value: shown, traceback: ['Uncaught ' + (typeof e === 'string' ? inspect(e) : shown)] };
}

// cleanStack returns the lines of a stack down to the cell's last frame:
// the driver's and node's frames below it say nothing about the cell.
function cleanStack(stack, file) {
  const lines = stack.split('\n');
  let end = lines.length;
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].includes(file)) {
      end = i + 1;
    }
  }
  if (end === lines.length) {
    end = lines.findIndex((l) => l.includes(__filename) || l.includes('(node:vm:'));
    if (end < 0) {
      end = lines.length;
    }
  }
  return lines.slice(0, end);
}

// show is the text of a cell's value: util.inspect's, without the
// driver's frames in the stack of an error.
function show(value, file) {
  const d = isNativeError(value) && Object.getOwnPropertyDescriptor(value, 'stack');
  if (!d || !d.writable || typeof d.value !== 'string') {
    return inspect(value);
  }
  try {
    value.stack = cleanStack(d.value, file).join('\n');
    return inspect(value);
  } finally {
    value.stack = d.value;
  }
}

// run executes one cell and reports its outputs, then "done".
async function run(cmd) {
  const id = cmd.id;
  const file = '<cell ' + (cmd.count || id) + '>';
  let interrupt;
  const interrupted = new Promise((_, reject) => {
    interrupt = () => reject(new Interrupted());
  });
  interrupted.catch(() => {});
  let status = 'ok';
  if (stopAt > settledAt) {
    settledAt = stopAt;
    settle();
  }
  running = { id, interrupt };
  try {
    if (id <= stopAt) {
      throw new Interrupted();
    }
    const { source, async, plain } = compile(cmd.code, file);
    let script;
    try {
      script = new vm.Script(source, { filename: file });
    } catch (e) {
      if (plain && e instanceof SyntaxError && /\b(import|await|export)\b/.test(cmd.code)) {
        e.message += ' (imports and top-level await need ' + needTS + ')';
      }
      throw e;
    }
    let value = cells.run(id, () => script.runInThisContext({ breakOnSigint: true, displayErrors: false }));
    if (async || (value !== null && (typeof value === 'object' || typeof value === 'function') && typeof value.then === 'function')) {
      const p = Promise.resolve(value);
      p.catch(() => {});
      value = await Promise.race([p, interrupted]);
    }
    if (!cmd.silent && value !== undefined) {
      send({ id, t: 'result', data: { 'text/plain': show(value, file) } });
    }
  } catch (e) {
    status = 'error';
    const d = describe(e, file);
    send({ id, t: 'error', name: d.name, value: d.value, traceback: d.traceback });
  } finally {
    running = null;
  }
  send({ id, t: 'done', status });
}

// Commands arrive one a line; executions run one after another.
let queue = Promise.resolve();
const commands = new net.Socket({ fd: commandFd, readable: true, writable: false });
let pending = '';
commands.setEncoding('utf8');
commands.on('data', (data) => {
  pending += data;
  let nl;
  while ((nl = pending.indexOf('\n')) >= 0) {
    const line = pending.slice(0, nl);
    pending = pending.slice(nl + 1);
    let cmd;
    try {
      cmd = parse(line);
    } catch (e) {
      log('bad command: ' + e.message);
      continue;
    }
    if (cmd.t === 'execute') {
      // A turn of the event loop first: the commands already sent (an
      // interrupt of this execution) are read before it starts.
      queue = queue.then(() => new Promise((resolve) => setImmediate(resolve))).then(() => run(cmd));
    } else if (cmd.t === 'interrupt') {
      stopAt = Math.max(stopAt, cmd.id);
      if (running && running.id === cmd.id) {
        running.interrupt();
      }
    }
  }
});
commands.on('end', () => process.exit(0));
commands.on('error', (e) => {
  log('reading commands: ' + e.message);
  process.exit(70);
});

send({ id: 0, t: 'ready', typescript: ts ? ts.version : '', missing: ts ? '' : tsMissing });
