// hutch's review pages: a tenant's sandboxes, their events and diffs, and
// the change sets bound to host workspaces. Every request goes to the API
// under /ui with the header X-Hutch-UI: 1 (the login cookie is only
// accepted with it); whatever the API answers is put in the page as text.
"use strict";

(() => {
  const { el } = HutchDiff;
  const main = document.getElementById("main");
  const enc = encodeURIComponent;
  // The page shown: its requests end when another is shown.
  let current = null;
  // Events kept on a sandbox's page (the daemon keeps as many).
  const maxEvents = 1000;
  // Whether the pages act as the daemon's operator, who alone may give
  // apply's word for a path it refuses (allow).
  const operator = document.body.dataset.operator === "true";

  class APIError extends Error {
    constructor(status, body) {
      super((body && body.message) || `the daemon answered ${status}`);
      this.status = status;
      this.body = body || {};
    }
  }

  async function call(method, path, body, signal) {
    const init = { method, headers: { "X-Hutch-UI": "1" }, credentials: "same-origin", cache: "no-store", signal };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch("/ui" + path, init);
    if (resp.status === 401) {
      location.assign("/ui/");
      throw new APIError(401, { message: "logged out" });
    }
    return resp;
  }

  async function check(resp) {
    if (resp.ok) return resp;
    let body = {};
    try { body = await resp.json(); } catch (e) { /* not JSON */ }
    throw new APIError(resp.status, body);
  }

  const getJSON = async (path, signal) => (await check(await call("GET", path, undefined, signal))).json();
  const getText = async (path, signal) => (await check(await call("GET", path, undefined, signal))).text();

  function when(s) {
    if (!s || s.startsWith("0001-")) return "";
    const d = new Date(s);
    return isNaN(d) ? String(s) : d.toLocaleString();
  }

  function size(n) {
    if (typeof n !== "number") return "";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let u = 0;
    while (n >= 1024 && u < units.length - 1) { n /= 1024; u++; }
    return (u ? n.toFixed(1) : String(n)) + " " + units[u];
  }

  const link = (href, text) => el("a", { href }, text);
  const sandboxHref = (id) => "#/sandboxes/" + enc(id);
  const changeHref = (id) => "#/changes/" + enc(id);
  const errorBox = (err) => el("p", { class: "error", role: "alert" }, err.message || String(err));

  function head(...names) {
    return el("thead", {}, el("tr", {}, ...names.map((n) => el("th", {}, n))));
  }

  function labels(m) {
    return el("span", { class: "labels" }, ...Object.entries(m || {}).map(([k, v]) => el("span", { class: "label" }, k + "=" + v)));
  }

  function counts(c) {
    return Object.entries(c || {}).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(", ") || "none";
  }

  function details(pairs) {
    const dl = el("dl", { class: "details" });
    for (const [k, v] of pairs) {
      if (v === undefined || v === null || v === "") continue;
      dl.append(el("dt", {}, k), el("dd", {}, v));
    }
    return dl;
  }

  // Approvals: the questions the tenant's sandboxes wait on (a policy's
  // approvals: rules, network.on_unknown: ask). The header counts them on
  // every page; the approvals page lists them all, a sandbox's page its
  // own. They are polled (and reloaded at a sandbox's approval events);
  // each shows its time left and goes once answered or expired.
  const approvalPoll = 2000;
  const answerButtons = [
    ["once", "Allow once", "primary", "Let this command (or host, or change set) go ahead this one time"],
    ["run", "Allow for this sandbox", "", "Allow the same command or host again, without asking, for the sandbox's life"],
    ["always", "Always", "", "Allow it from now on: on hutch serve, for the sandbox's life (there is no policy file to write it to)"],
    ["deny", "Deny", "danger", "Refuse it"],
  ];
  // approvalView is the list of approvals the page shows, if any: its
  // element and which questions it keeps.
  let approvalView = null;
  // clockSkew is the browser's clock minus the daemon's, from the Date of
  // its answers, so that the time left is the daemon's.
  let clockSkew = 0;
  // pendingNow are the questions of the last poll; answered, those
  // answered here since (a poll under way may still hold them).
  let pendingNow = [];
  const answered = new Set();

  function timeLeft(p) {
    const s = Math.max(0, Math.floor((Date.parse(p.expires) + clockSkew - Date.now()) / 1000));
    return s >= 60 ? `${Math.floor(s / 60)} min ${s % 60} s left` : `${s} s left`;
  }

  const expired = (p) => Date.parse(p.expires) + clockSkew <= Date.now();

  // approvalItem is a question, with its answers' buttons.
  function approvalItem(p) {
    const left = el("span", { class: "left" }, timeLeft(p));
    const note = el("div", { class: "note" });
    // A change set is applied once: only once or deny mean anything.
    const offered = p.kind === "file" ? answerButtons.filter(([a]) => a === "once" || a === "deny") : answerButtons;
    const buttons = offered.map(([answer, label, cls, title]) =>
      el("button", { type: "button", class: cls || null, "data-answer": answer, title }, label));
    const li = el("li", { class: "approval", "data-id": p.id, "data-sandbox": p.sandbox || "", "data-kind": p.kind },
      el("div", {}, el("span", { class: "badge" }, p.kind), p.sandbox ? "in sandbox " : null, p.sandbox ? link(sandboxHref(p.sandbox), p.sandbox) : null, left),
      el("pre", { class: "subject" }, p.subject),
      details([["asked about", p.command && p.command !== p.subject ? el("code", {}, p.command) : ""], ["rule", p.rule ? el("code", {}, p.rule) : ""],
        ["reason", p.reason], ["asked", when(p.created)]]),
      el("div", { class: "answers" }, ...buttons), note);
    li.tick = () => { left.textContent = timeLeft(p); };
    for (const b of buttons) {
      b.addEventListener("click", async () => {
        li.classList.add("answering");
        for (const x of buttons) x.disabled = true;
        try {
          const resp = await call("POST", "/v1/approvals/" + enc(p.id), { answer: b.dataset.answer });
          if (resp.ok || resp.status === 404) {
            forgetApproval(p.id);
            if (resp.status === 404) flashApprovals("It was answered already, or expired.");
            return;
          }
          await check(resp);
        } catch (err) {
          note.replaceChildren(errorBox(err));
          li.classList.remove("answering");
          for (const x of buttons) x.disabled = false;
        }
      });
    }
    return li;
  }

  // flashApprovals says something about the answers above the list.
  function flashApprovals(text) {
    const n = document.getElementById("approvals-note");
    if (n) n.textContent = text;
  }

  // forgetApproval drops a question answered here, at once.
  function forgetApproval(id) {
    answered.add(id);
    showApprovals();
  }

  // showApprovals brings the count and the page's list up to date:
  // questions gone or expired leave it, new ones join it, the others stay
  // as they are (a button being clicked is not replaced).
  function showApprovals() {
    const live = pendingNow.filter((p) => !expired(p) && !answered.has(p.id));
    const count = document.getElementById("approvals-count");
    count.textContent = String(live.length);
    count.hidden = live.length === 0;
    if (!approvalView) return;
    const { list, keep, empty } = approvalView;
    const want = live.filter(keep);
    const ids = new Set(want.map((p) => p.id));
    for (const li of [...list.children]) {
      if (!ids.has(li.dataset.id)) li.remove();
      else li.tick();
    }
    const have = new Set([...list.children].map((li) => li.dataset.id));
    for (const p of want) {
      if (!have.has(p.id)) list.append(approvalItem(p));
    }
    empty.hidden = want.length > 0;
  }

  // pollApprovals reads the tenant's questions.
  async function pollApprovals() {
    try {
      const resp = await check(await call("GET", "/v1/approvals"));
      const date = Date.parse(resp.headers.get("Date") || "");
      if (!isNaN(date)) clockSkew = Date.now() - date - 500; // Date has whole seconds
      const body = await resp.json();
      pendingNow = Array.isArray(body) ? body : (body.approvals || []);
      const ids = new Set(pendingNow.map((p) => p.id));
      for (const id of answered) if (!ids.has(id)) answered.delete(id);
    } catch (err) {
      // The daemon is restarting, or is one without approvals: the count
      // stays as it was; a page's list says why.
      if (approvalView) approvalView.empty.textContent = err.message;
      return;
    }
    showApprovals();
  }

  // approvalList is a list of the questions keep selects, for a page.
  function approvalList(keep, emptyText) {
    const list = el("ul", { class: "approvals" });
    const empty = el("p", { class: "empty" }, emptyText);
    approvalView = { list, keep, empty };
    showApprovals();
    return [el("p", { class: "meta", id: "approvals-note", role: "status" }), list, empty];
  }

  async function approvalPage() {
    main.replaceChildren(el("h2", {}, "Approvals"),
      el("p", { class: "meta" }, "Commands, hosts and change sets your sandboxes' approval rules hold until someone answers; unanswered, they are refused when their time runs out."),
      el("div", { id: "approvals" }, ...approvalList(() => true, "Nothing waits for an answer.")));
    await pollApprovals();
  }

  // Pages.

  async function sandboxList(signal) {
    const list = await getJSON("/v1/sandboxes", signal);
    const rows = list.map((s) => el("tr", { "data-id": s.id },
      el("td", {}, link(sandboxHref(s.id), s.id)),
      el("td", {}, el("span", { class: "state " + s.state }, s.state)),
      el("td", {}, s.tier),
      el("td", { title: s.image || "" }, s.image ? s.image.replace(/^sha256:/, "").slice(0, 12) : "host root"),
      el("td", {}, when(s.created_at)),
      el("td", {}, labels(s.labels)),
      el("td", {}, s.change_set ? link(changeHref(s.change_set), s.change_set) : "")));
    main.replaceChildren(el("h2", {}, "Sandboxes"),
      list.length
        ? el("table", { class: "list", id: "sandboxes" }, head("id", "state", "tier", "image", "created", "labels", "change set"), el("tbody", {}, ...rows))
        : el("p", { class: "empty" }, "No sandboxes."));
  }

  async function sandboxPage(id, signal) {
    const s = await getJSON("/v1/sandboxes/" + enc(id), signal);
    const refusals = el("div", { id: "refusals" });
    const events = el("tbody");
    const diffTitle = el("h2", {}, "Changes against its base");
    const diffBox = el("div", { class: "diff", id: "diff" });
    const snaps = el("div", { id: "snapshots" });
    main.replaceChildren(
      el("h2", {}, "Sandbox ", el("code", {}, s.id)),
      details([["state", s.state], ["tier", s.tier], ["image", s.image || "the host's root"], ["created", when(s.created_at)],
        ["expires", when(s.expires_at)], ["workspace", s.workspace], ["labels", Object.keys(s.labels || {}).length ? labels(s.labels) : ""],
        ["change set", s.change_set ? link(changeHref(s.change_set), s.change_set) : ""]]),
      el("h2", {}, "Waiting for approval"),
      el("div", { id: "approvals" }, ...approvalList((p) => p.sandbox === s.id, "Nothing waits for an answer.")),
      el("h2", {}, "Egress refusals"), refusals,
      el("h2", {}, "Events"),
      el("table", { class: "list events", id: "events" }, head("#", "time", "event", "details"), events),
      diffTitle, diffBox,
      el("h2", {}, "Snapshots"), snaps);
    const diff = (against, title) => {
      diffTitle.textContent = title;
      loadDiff(diffBox, `/v1/sandboxes/${enc(id)}/diff?format=patch&against=${enc(against)}`, {}, signal);
    };
    diff("", "Changes against its base");
    loadSnapshots(id, snaps, diff, signal);
    streamEvents(id, events, refusals, signal);
  }

  // loads counts the diffs asked of each box: only the last one asked is
  // shown, whichever comes first.
  const loads = new WeakMap();

  // loadDiff shows the patch at path in box; the viewer, or null (also
  // when another diff was asked of box meanwhile).
  async function loadDiff(box, path, opts, signal) {
    const n = (loads.get(box) || 0) + 1;
    loads.set(box, n);
    box.replaceChildren(el("p", { class: "loading" }, "Loading the diff…"));
    try {
      const text = await getText(path, signal);
      return loads.get(box) === n ? HutchDiff.render(box, text, opts) : null;
    } catch (err) {
      if (!signal.aborted && loads.get(box) === n) box.replaceChildren(errorBox(err));
      return null;
    }
  }

  async function loadSnapshots(id, box, diff, signal) {
    try {
      const all = (await getJSON("/v1/snapshots", signal)).snapshots || [];
      const mine = all.filter((s) => s.source === id);
      if (!mine.length) {
        box.replaceChildren(el("p", { class: "empty" }, "No snapshots."));
        return;
      }
      box.replaceChildren(el("table", { class: "list" }, head("id", "name", "created", "size", ""),
        el("tbody", {}, ...mine.map((s) => {
          const b = el("button", { type: "button" }, "Diff against it");
          b.addEventListener("click", () => diff(s.id, "Changes since snapshot " + s.id));
          return el("tr", {}, el("td", {}, s.id), el("td", {}, s.name || ""), el("td", {}, when(s.created_at)), el("td", {}, size(s.size)), el("td", {}, b));
        }))));
    } catch (err) {
      if (signal.aborted) return;
      box.replaceChildren(err.status === 501 ? el("p", { class: "empty" }, err.message) : errorBox(err));
    }
  }

  // describe is an event's details, as text.
  function describe(e) {
    const d = e.data || {};
    switch (e.type) {
      case "egress_refused":
        return `${d.protocol || ""} ${d.host || ""}:${d.port || ""} — ${d.reason || ""}`;
      case "lookup":
        return `${d.host || ""} — ${d.reason || ""}`;
      case "exec":
        return `pid ${d.pid}: ${(d.args || []).join(" ")}`;
      case "exit":
        return `pid ${d.pid}: ` + (d.error ? d.error : d.signal ? `signal ${d.signal}` : `exit ${d.code}`) + (d.timed_out ? " (timed out)" : "");
      case "created":
        return [d.tier && "tier " + d.tier, d.expires && "expires " + when(d.expires), d.warm && "from the warm pool"].filter(Boolean).join(", ");
      case "ended":
        return d.reason || "";
      case "snapshot":
        return `${d.snapshot || ""} (${size(d.size)})`;
      case "approval.requested":
        return `${d.kind || ""} ${d.subject || ""} — asked` + (d.rule ? ` by ${d.rule}` : "") + (d.reason ? `: ${d.reason}` : "");
      case "approval.answered":
        return `${d.kind || ""} ${d.subject || ""} — ${d.answer || ""} by ${d.by || ""}` + (typeof d.took_ms === "number" ? ` after ${(d.took_ms / 1000).toFixed(1)} s` : "");
      case "approval.denied":
        return `${d.kind || ""} ${d.subject || ""} — refused` + (d.rule ? ` by ${d.rule}` : "") + (d.reason ? `: ${d.reason}` : "");
      default:
        return Object.keys(d).length ? JSON.stringify(d) : "";
    }
  }

  // streamEvents follows a sandbox's events (NDJSON) until it ends or the
  // page changes: each a row, egress refusals highlighted and summed up
  // with what would allow them.
  async function streamEvents(id, tbody, refusals, signal) {
    const seen = new Map();
    const showRefusals = () => {
      if (!seen.size) {
        refusals.replaceChildren(el("p", { class: "empty" }, "None."));
        return;
      }
      refusals.replaceChildren(el("ul", { class: "refusals" }, ...[...seen.values()].map((r) =>
        el("li", { class: "refused" }, el("strong", {}, r.dest), ` (${r.count}×, ${r.protocol}) — ${r.reason}`,
          r.allow ? el("span", { class: "allow" }, "; allow with ", el("code", {}, r.allow)) : null))));
    };
    showRefusals();
    const add = (e) => {
      const d = e.data || {};
      const cls = e.type === "egress_refused" ? "refused" : e.type === "lookup" ? "lookup" : "";
      tbody.append(el("tr", { class: cls, "data-type": e.type },
        el("td", {}, e.seq), el("td", {}, when(e.time)), el("td", {}, e.type),
        el("td", {}, describe(e), d.allow ? el("span", { class: "allow" }, " — allow with ", el("code", {}, d.allow)) : null)));
      while (tbody.rows.length > maxEvents) tbody.rows[0].remove();
      if (e.type.startsWith("approval.")) pollApprovals();
      if (e.type === "egress_refused") {
        const dest = `${d.host}:${d.port}`;
        const r = seen.get(dest) || { dest, count: 0, protocol: d.protocol, reason: d.reason, allow: d.allow };
        r.count++;
        seen.set(dest, r);
        showRefusals();
      }
    };
    try {
      const resp = await check(await call("GET", `/v1/sandboxes/${enc(id)}/events`, undefined, signal));
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line.trim()) add(JSON.parse(line));
        }
      }
    } catch (err) {
      if (!signal.aborted) tbody.append(el("tr", {}, el("td", { colspan: 4 }, errorBox(err))));
    }
  }

  async function changeList(signal) {
    const list = (await getJSON("/v1/changes", signal)).changes || [];
    const rows = list.map((c) => el("tr", { "data-id": c.id },
      el("td", {}, link(changeHref(c.id), c.id)),
      el("td", {}, c.sandbox ? link(sandboxHref(c.sandbox), c.sandbox) : ""),
      el("td", {}, c.workspace || ""),
      el("td", {}, when(c.created)),
      el("td", {}, when(c.ended)),
      el("td", {}, counts(c.counts)),
      el("td", {}, status(c))));
    main.replaceChildren(el("h2", {}, "Change sets"),
      list.length
        ? el("table", { class: "list", id: "changes" }, head("id", "sandbox", "workspace", "created", "ended", "changes", "status"), el("tbody", {}, ...rows))
        : el("p", { class: "empty" }, "No change sets: a sandbox the operator bound to a host workspace has one."));
  }

  const set = (t) => t && !String(t).startsWith("0001-");

  function status(c) {
    if (c.running) return "its sandbox still runs";
    if (set(c.applied)) return "applied " + when(c.applied);
    return "to review";
  }

  async function changePage(cid, signal) {
    const c = await getJSON("/v1/changes/" + enc(cid), signal);
    const actions = el("div", { class: "actions" });
    const outcome = el("div", { id: "outcome" });
    const box = el("div", { class: "diff", id: "diff" });
    main.replaceChildren(
      el("h2", {}, "Change set ", el("code", {}, c.id)),
      details([["sandbox", c.sandbox ? link(sandboxHref(c.sandbox), c.sandbox) : ""], ["workspace", c.workspace], ["created", when(c.created)],
        ["ended", when(c.ended)], ["changes", counts(c.counts)], ["status", el("span", { id: "status" }, status(c))]]),
      actions, outcome, box);
    const viewer = await loadDiff(box, `/v1/changes/${enc(cid)}/diff?format=patch`, { select: !c.running && !set(c.applied), empty: "No changes." }, signal);
    const apply = el("button", { type: "button", id: "apply", class: "primary" }, "Apply to the workspace");
    const discard = el("button", { type: "button", id: "discard", class: "danger" }, "Discard");
    apply.disabled = c.running || set(c.applied);
    discard.disabled = c.running;
    actions.replaceChildren(apply, " ", discard);
    if (c.running) actions.append(el("span", { class: "meta" }, " Apply and Discard wait until its sandbox ended."));

    // confirm asks before an action, in the page.
    const confirm = (question, yes, act) => {
      const y = el("button", { type: "button", id: "confirm-yes", class: "primary" }, yes);
      const n = el("button", { type: "button", id: "confirm-no" }, "Cancel");
      const panel = el("div", { class: "confirm", id: "confirm", role: "dialog" }, el("p", {}, question), y, " ", n);
      n.addEventListener("click", () => panel.remove());
      y.addEventListener("click", async () => {
        y.disabled = true;
        n.disabled = true;
        try {
          await act();
        } finally {
          panel.remove();
        }
      });
      outcome.replaceChildren(panel);
    };

    const pathList = (title, items) => (items && items.length)
      ? [el("h4", {}, title), el("ul", {}, ...items.map((p) => typeof p === "string" ? el("li", {}, p) : el("li", {}, el("code", {}, p.path), " — ", p.problem)))] : [];

    // send applies the chosen files with opts: allow, the paths a person
    // gave their word for (protected names, links out of the workspace,
    // set-id bits, which the daemon refuses without it), and skip, to
    // leave those out instead.
    const send = async (chosen, all, opts) => {
      const body = all ? {} : { paths: chosen };
      if (opts.allow.length) body.allow = opts.allow;
      if (opts.skip) body.skip_refused = true;
      const resp = await call("POST", `/v1/changes/${enc(cid)}/apply`, body, signal);
      let answer = {};
      try { answer = await resp.json(); } catch (e) { /* none */ }
      if (resp.ok) {
        apply.disabled = true;
        if (viewer) viewer.problems([]);
        document.getElementById("status").textContent = "applied";
        outcome.replaceChildren(el("div", { class: "result", id: "result" }, el("p", {}, "Applied."),
          ...pathList("Written or removed", answer.applied), ...pathList("Left out", answer.skipped)));
        return;
      }
      if (resp.status === 409 && Array.isArray(answer.problems)) {
        if (viewer) viewer.problems(answer.problems);
        const boxes = [];
        const refused = answer.problems.filter((p) => p.refused);
        // A path changed in the workspace cannot be allowed: while there
        // is one, nothing else is offered.
        const conflicts = answer.problems.length - refused.length;
        const again = el("button", { type: "button", id: "apply-allow" }, "Apply again, allowing the ticked paths");
        again.addEventListener("click", () => {
          const more = boxes.filter((b) => b.checked).map((b) => b.dataset.path);
          if (!more.length) return;
          confirm(`Apply, allowing ${more.length === 1 ? more[0] : more.length + " paths"} as they are?`, "Apply",
            () => send(chosen, all, { allow: [...new Set([...opts.allow, ...more])] }));
        });
        const skip = el("button", { type: "button", id: "apply-skip" }, "Apply the rest, leaving these out");
        skip.addEventListener("click", () => confirm("Apply everything else, leaving the refused paths out?", "Apply", () => send(chosen, all, { allow: opts.allow, skip: true })));
        outcome.replaceChildren(el("div", { class: "conflicts", id: "conflicts", role: "alert" },
          el("p", {}, answer.message || "Nothing was applied."),
          el("ul", {}, ...answer.problems.map((p) => {
            const li = el("li", { "data-path": p.path, class: p.refused ? "refused" : "conflict" }, el("code", {}, p.path), " — ", p.problem);
            if (p.refused && !conflicts && operator) {
              const b = el("input", { type: "checkbox", "aria-label": "allow " + p.path });
              b.dataset.path = p.path;
              boxes.push(b);
              li.append(" ", el("label", {}, b, " allow"));
            }
            return li;
          })),
          conflicts ? el("p", { class: "meta" }, "The workspace changed since the sandbox saw it: look at those files, then apply again, or discard the set.") : null,
          refused.length > 0 && !conflicts && !operator
            ? el("p", { class: "meta", id: "operator-only" }, "Only the daemon's operator may apply these paths as they are (on the daemon's unix socket); you may apply the rest, or discard the set.") : null,
          refused.length > 0 && !conflicts ? el("p", {}, operator ? again : null, operator ? " " : null, skip) : null));
        return;
      }
      outcome.replaceChildren(errorBox(new APIError(resp.status, answer)));
    };

    apply.addEventListener("click", () => {
      const chosen = viewer ? viewer.selected() : [];
      const all = viewer ? chosen.length === box.querySelectorAll(".filelist input[type=checkbox]").length : true;
      if (!all && !chosen.length) {
        outcome.replaceChildren(el("p", { class: "error" }, "Choose at least one file to apply."));
        return;
      }
      const what = all ? "every change" : `${chosen.length} of the changes`;
      confirm(`Apply ${what} to the workspace ${c.workspace || ""}?`, "Apply", () => send(chosen, all, { allow: [] }));
    });

    discard.addEventListener("click", () => {
      confirm("Discard this change set? What the sandbox changed is lost; the workspace stays as it is.", "Discard", async () => {
        try {
          await check(await call("DELETE", `/v1/changes/${enc(cid)}`, undefined, signal));
          apply.disabled = true;
          discard.disabled = true;
          outcome.replaceChildren(el("div", { class: "result", id: "result" }, el("p", {}, "Discarded. "), link("#/changes", "Back to the change sets")));
        } catch (err) {
          outcome.replaceChildren(errorBox(err));
        }
      });
    });
  }

  function setNav(page) {
    for (const a of document.querySelectorAll("header nav a")) {
      a.classList.toggle("current", a.getAttribute("href") === "#/" + (page === "changes" || page === "approvals" ? page : "sandboxes"));
    }
  }

  async function route() {
    if (current) current.abort();
    current = new AbortController();
    const signal = current.signal;
    let parts;
    try {
      parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    } catch (e) {
      parts = [];
    }
    setNav(parts[0]);
    approvalView = null;
    main.replaceChildren(el("p", { class: "loading" }, "Loading…"));
    try {
      if (parts[0] === "approvals") await approvalPage();
      else if (parts[0] === "sandboxes" && parts[1]) await sandboxPage(parts[1], signal);
      else if (parts[0] === "changes" && parts[1]) await changePage(parts[1], signal);
      else if (parts[0] === "changes") await changeList(signal);
      else await sandboxList(signal);
      main.dataset.page = parts[0] || "sandboxes";
    } catch (err) {
      if (!signal.aborted) main.replaceChildren(errorBox(err));
    }
  }

  window.addEventListener("hashchange", route);
  route();
  pollApprovals();
  setInterval(pollApprovals, approvalPoll);
  // The time left of each question, by the second; the expired go.
  setInterval(showApprovals, 1000);
})();
