// hutch's diff viewer: parses a unified diff with git's headers (what
// hutch's API answers with format=patch) and shows it side by side. What
// it shows comes from a sandbox: every name and line goes into the page
// as text (textContent), never as markup.
"use strict";

const HutchDiff = (() => {
  // Rows of one file rendered at first; the rest on request.
  const firstRows = 2000;
  // Rows of a diff's files rendered at once; files past them are laid
  // out when they come near the screen.
  const eagerRows = 3000;

  // unquote reads a path git wrote in double quotes with C escapes
  // (octal bytes of UTF-8, \t, \n, \", \\) starting at s[i] === '"'. It
  // returns the path and the index after the closing quote.
  function unquote(s, i) {
    const bytes = [];
    const push = (str) => { for (const b of new TextEncoder().encode(str)) bytes.push(b); };
    const esc = { a: 7, b: 8, t: 9, n: 10, v: 11, f: 12, r: 13, '"': 34, "\\": 92 };
    i++;
    while (i < s.length && s[i] !== '"') {
      if (s[i] === "\\" && i + 1 < s.length) {
        const c = s[i + 1];
        if (/[0-7]/.test(c)) {
          const oct = /^[0-7]{1,3}/.exec(s.slice(i + 1))[0];
          bytes.push(parseInt(oct, 8) & 255);
          i += 1 + oct.length;
          continue;
        }
        if (c in esc) {
          bytes.push(esc[c]);
        } else {
          push(c);
        }
        i += 2;
        continue;
      }
      push(s[i]);
      i++;
    }
    return [new TextDecoder("utf-8").decode(new Uint8Array(bytes)), i + 1];
  }

  // name reads one path of a header line: quoted, or the rest of the line.
  function name(s) {
    return s.startsWith('"') ? unquote(s, 0)[0] : s;
  }

  // stripPrefix drops git's "a/" or "b/"; /dev/null is no path.
  function stripPrefix(p) {
    if (p === "/dev/null") return "";
    return p.replace(/^[ab]\//, "");
  }

  // gitPaths reads the two paths of "diff --git A B".
  function gitPaths(rest) {
    if (rest.startsWith('"')) {
      const [a, i] = unquote(rest, 0);
      const b = name(rest.slice(i + 1));
      return [stripPrefix(a), stripPrefix(b)];
    }
    // Unquoted: "a/P b/P", the same P twice unless it was renamed (then
    // the rename lines name both).
    const n = (rest.length - 5) / 2;
    if (Number.isInteger(n) && n > 0 && rest.slice(2, 2 + n) === rest.slice(5 + n)) {
      return [rest.slice(2, 2 + n), rest.slice(5 + n)];
    }
    const sp = rest.indexOf(" b/");
    if (sp > 0) return [stripPrefix(rest.slice(0, sp)), rest.slice(sp + 3)];
    return [stripPrefix(rest), stripPrefix(rest)];
  }

  const modeNames = { "120000": "symbolic link", "160000": "submodule" };

  function describeMode(m) {
    if (!m) return "";
    if (modeNames[m]) return modeNames[m];
    return "mode " + m;
  }

  // parse turns a patch into entries: files ({path, oldPath, status,
  // oldMode, newMode, binary, large, notes, hunks}) and notes of their own
  // ({note}: a directory, a refused entry, an edit made meanwhile).
  function parse(text) {
    const lines = text.split("\n");
    if (lines.length && lines[lines.length - 1] === "") lines.pop();
    const out = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      if (!line.startsWith("diff --git ")) {
        out.push({ note: line });
        i++;
        continue;
      }
      const [a, b] = gitPaths(line.slice("diff --git ".length));
      const f = { oldPath: a, path: b, status: "modified", oldMode: "", newMode: "", binary: false, large: false, notes: [], hunks: [] };
      out.push(f);
      i++;
      header: while (i < lines.length) {
        const l = lines[i];
        const field = (p) => l.startsWith(p) ? l.slice(p.length) : null;
        let v;
        if ((v = field("new file mode ")) !== null) { f.status = "added"; f.newMode = v; }
        else if ((v = field("deleted file mode ")) !== null) { f.status = "deleted"; f.oldMode = v; }
        else if ((v = field("old mode ")) !== null) f.oldMode = v;
        else if ((v = field("new mode ")) !== null) f.newMode = v;
        else if ((v = field("rename from ")) !== null) { f.status = "renamed"; f.oldPath = name(v); }
        else if ((v = field("rename to ")) !== null) { f.status = "renamed"; f.path = name(v); }
        else if ((v = field("hard link to ")) !== null) f.notes.push("hard link to " + name(v));
        else if (field("similarity index ") !== null || field("index ") !== null) { /* nothing to show */ }
        else if (l.startsWith("Binary files ")) { f.binary = true; f.notes.push(l); }
        else if (l.startsWith("File too large to show")) { f.large = true; f.notes.push(l); }
        else if ((v = field("--- ")) !== null) { const p = stripPrefix(name(v)); if (p) f.oldPath = p; }
        else if ((v = field("+++ ")) !== null) { const p = stripPrefix(name(v)); if (p) f.path = p; }
        else break header;
        i++;
      }
      while (i < lines.length) {
        const m = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$/.exec(lines[i]);
        if (!m) break;
        const h = { header: lines[i], oldStart: +m[1], newStart: +m[3], lines: [] };
        let o = m[2] === undefined ? 1 : +m[2];
        let n = m[4] === undefined ? 1 : +m[4];
        i++;
        while (i < lines.length && (o > 0 || n > 0)) {
          const l = lines[i];
          const c = l[0];
          if (c === " ") { o--; n--; }
          else if (c === "-") o--;
          else if (c === "+") n--;
          else if (c !== "\\") break;
          h.lines.push(l);
          i++;
        }
        while (i < lines.length && lines[i].startsWith("\\")) h.lines.push(lines[i++]);
        f.hunks.push(h);
      }
      if (f.oldMode && f.newMode && f.oldMode !== f.newMode) {
        f.notes.unshift(describeMode(f.oldMode) + " → " + describeMode(f.newMode));
        if (f.status === "modified" && !f.hunks.length && !f.binary && !f.large) f.status = "mode changed";
      }
      const m = f.newMode || f.oldMode;
      if (modeNames[m]) f.kind = modeNames[m];
    }
    return out;
  }

  // el makes an element: attributes set as attributes, children appended
  // as nodes or as text.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  // rows pairs a hunk's lines side by side: context on both sides,
  // deletions against the insertions that follow them.
  function rows(h) {
    const out = [];
    let o = h.oldStart, n = h.newStart;
    let dels = [], adds = [];
    const flush = () => {
      for (let k = 0; k < Math.max(dels.length, adds.length); k++) {
        out.push({ left: dels[k], right: adds[k] });
      }
      dels = [];
      adds = [];
    };
    for (const l of h.lines) {
      const c = l[0], t = l.slice(1);
      if (c === "-") dels.push({ no: o++, text: t, kind: "del" });
      else if (c === "+") adds.push({ no: n++, text: t, kind: "add" });
      else if (c === "\\") { flush(); out.push({ note: l.slice(2) }); }
      else { flush(); out.push({ left: { no: o++, text: t, kind: "ctx" }, right: { no: n++, text: t, kind: "ctx" } }); }
    }
    flush();
    return out;
  }

  function cell(side, which) {
    if (!side) return [el("td", { class: "no empty" }), el("td", { class: "code empty" })];
    return [
      el("td", { class: "no " + side.kind, "data-side": which }, side.no),
      el("td", { class: "code " + side.kind, "data-side": which }, side.text),
    ];
  }

  // table renders a file's hunks, the first firstRows rows at once.
  function table(f) {
    const all = [];
    for (const h of f.hunks) {
      all.push({ hunk: h.header });
      all.push(...rows(h));
    }
    const tbody = el("tbody");
    const add = (from, to) => {
      for (const r of all.slice(from, to)) {
        if (r.hunk !== undefined) tbody.append(el("tr", { class: "hunk" }, el("td", { colspan: 4 }, r.hunk)));
        else if (r.note !== undefined) tbody.append(el("tr", { class: "nonl" }, el("td", { colspan: 4 }, r.note)));
        else tbody.append(el("tr", {}, ...cell(r.left, "old"), ...cell(r.right, "new")));
      }
    };
    add(0, firstRows);
    const t = el("table", { class: "sbs" },
      el("colgroup", {}, el("col", { class: "no" }), el("col", { class: "code" }), el("col", { class: "no" }), el("col", { class: "code" })),
      tbody);
    if (all.length <= firstRows) return t;
    const more = el("button", { type: "button", class: "more" }, `Show ${all.length - firstRows} more lines`);
    more.addEventListener("click", () => { add(firstRows, all.length); more.remove(); });
    return el("div", {}, t, more);
  }

  function badge(status) {
    return el("span", { class: "badge " + status.replace(/\s+/g, "-") }, status);
  }

  // badges are a file's status and kind, each followed by a space.
  function badges(f) {
    return [badge(f.status), " ", ...(f.kind ? [badge(f.kind), " "] : [])];
  }

  // label is a file's name as the list and its heading show it.
  function label(f) {
    return f.status === "renamed" && f.oldPath !== f.path ? f.oldPath + " → " + f.path : f.path;
  }

  // render shows a patch in container: a list of its files (with a check
  // box each when opts.select) and each file side by side. It returns
  // {count, selected(), problems(list)}: the paths checked, and a way to
  // mark each path's problem ({path, problem}).
  function render(container, text, opts) {
    opts = opts || {};
    const entries = parse(text);
    container.replaceChildren();
    if (!entries.length) {
      container.append(el("p", { class: "empty-diff" }, opts.empty || "No changes."));
      return { count: 0, selected: () => [], problems: () => {} };
    }
    const list = el("ol", { class: "filelist" });
    const body = el("div", { class: "files" });
    const byPath = new Map();
    const boxes = [];
    let budget = eagerRows;
    const lazy = new IntersectionObserver((seen) => {
      for (const x of seen) {
        if (!x.isIntersecting) continue;
        lazy.unobserve(x.target);
        x.target.replaceWith(table(x.target.file));
      }
    }, { rootMargin: "1500px 0px" });
    entries.forEach((f, idx) => {
      const sectionID = "diff-file-" + idx;
      if (f.note !== undefined) {
        list.append(el("li", { class: "note" }, f.note));
        body.append(el("p", { class: "note", id: sectionID }, f.note));
        return;
      }
      const jump = el("button", { type: "button", class: "jump" }, label(f));
      const problem = el("span", { class: "problem" });
      const item = el("li", { "data-path": f.path }, ...badges(f), jump, problem);
      if (opts.select) {
        const box = el("input", { type: "checkbox", checked: true, "aria-label": "include " + f.path });
        box.dataset.path = f.path;
        boxes.push(box);
        item.prepend(box);
      }
      list.append(item);
      const head = el("h3", {}, ...badges(f), el("span", { class: "path" }, label(f)));
      const sec = el("section", { class: "file", id: sectionID, "data-path": f.path }, head);
      for (const n of f.notes) sec.append(el("p", { class: "meta" }, n));
      const lines = f.hunks.reduce((n, h) => n + h.lines.length + 1, 0);
      if (f.hunks.length && lines <= budget) {
        sec.append(table(f));
        budget -= lines;
      } else if (f.hunks.length) {
        // Laid out when it comes near the screen: a diff of thousands of
        // files costs the browser only what is looked at.
        const holder = el("div", { class: "lazy" }, `${lines} lines`);
        holder.file = f;
        holder.style.height = Math.min(lines, firstRows) * 1.45 + "em";
        sec.append(holder);
        lazy.observe(holder);
      }
      else if (!f.notes.length) sec.append(el("p", { class: "meta" }, f.status === "added" || f.status === "deleted" ? "empty file" : "no change of content"));
      body.append(sec);
      jump.addEventListener("click", () => sec.scrollIntoView({ block: "start" }));
      byPath.set(f.path, { item, problem, sec });
      if (f.oldPath && f.oldPath !== f.path) byPath.set(f.oldPath, { item, problem, sec });
    });
    const n = entries.filter((e) => e.note === undefined).length;
    container.append(el("h3", { class: "files-head" }, n === 1 ? "1 file" : `${n} files`), list, body);
    return {
      count: entries.length,
      selected: () => boxes.filter((b) => b.checked).map((b) => b.dataset.path),
      problems: (ps) => {
        for (const v of byPath.values()) { v.problem.textContent = ""; v.item.classList.remove("conflict"); v.sec.classList.remove("conflict"); }
        for (const p of ps || []) {
          const v = byPath.get(p.path);
          if (!v) continue;
          v.problem.textContent = " — " + p.problem;
          v.item.classList.add("conflict");
          v.sec.classList.add("conflict");
        }
      },
    };
  }

  return { parse, render, el };
})();
