// ssrun console: draws each page from the admin endpoint's JSON API.
// Everything that comes from the store or the rules goes into the page as
// text nodes (el() below), never as HTML.
"use strict";

const main = document.getElementById("main");
let live = null; // the open EventSource of the live page

// el builds an element: attrs are properties or attributes; children are
// nodes or strings (made text nodes).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "onclick" || k === "onsubmit" || k === "onchange") e[k] = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function page(title, ...content) {
  main.replaceChildren(el("h1", {}, title), ...content.flat(Infinity).filter((c) => c !== undefined && c !== null && c !== ""));
}

async function api(path) {
  const res = await fetch(path, { headers: { Accept: "application/json" }, credentials: "same-origin" });
  const body = await res.json().catch(() => ({ error: res.status + " " + res.statusText }));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function q(params) {
  return new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== "")).toString();
}

function link(hash, text, attrs) { return el("a", Object.assign({ href: hash }, attrs || {}), text); }
function whyLink(key) { return link("#/why?" + q({ key }), key); }
function ruleLink(name) { return link("#/rule?" + q({ name }), name); }
function when(t) { return t ? new Date(t).toLocaleTimeString() : ""; }
function ms(v) { return v === undefined || v === null ? "" : v.toFixed(v < 10 ? 2 : 1) + " ms"; }

function outcomeClass(o) {
  return { handled: "ok", failed: "bad", denied: "bad", fenced: "bad", dropped: "warn", skipped: "muted" }[o] || "";
}

function table(head, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
}

function by(e) {
  if (e.by_rule) return ["rule ", ruleLink(e.by_rule)];
  if (e.by_client) return ["client ", el("code", {}, e.by_client)];
  return "";
}

function writesOf(e) {
  return (e.writes || []).map((w, i) => [i ? ", " : "", w.op + " ", whyLink(w.key)]);
}

// entryRow draws a run or a skip; a click opens why of what it wrote (else
// of its key), or why not for a skip.
function entryRow(e) {
  const target = e.kind === "skip" ? "#/whynot?" + q({ key: e.key, rule: e.rule })
    : "#/why?" + q({ key: (e.writes && e.writes.length ? e.writes[e.writes.length - 1].key : e.key) });
  return el("tr", { class: "click", "data-seq": e.seq, "data-rule": e.rule || "", onclick: () => { location.hash = target; } },
    el("td", {}, when(e.at)),
    el("td", {}, e.rule || "(all)"),
    el("td", { class: "mono" }, e.key),
    el("td", {}, e.op),
    el("td", { class: "mono muted" }, e.version || ""),
    el("td", {}, by(e)),
    el("td", { class: outcomeClass(e.outcome) }, e.outcome, e.reason ? " (" + e.reason + ")" : "", e.error ? ": " + e.error : "",
      (e.denied || []).length ? " refused: " + e.denied.join(", ") : ""),
    el("td", {}, ms(e.took_ms)),
    el("td", { class: "mono" }, writesOf(e)));
}
const entryHead = ["time", "rule", "key", "op", "version", "caused by", "outcome", "took", "writes"];

// --- pages

async function rules() {
  const doc = await api("/console/api/rules");
  const group = doc.owned !== undefined;
  const runsOn = (name) => (doc.owned.includes(name) ? "this host" : doc.standby.includes(name) ? "another host" : "");
  const rows = doc.rules.map((r) => el("tr", {},
    el("td", {}, ruleLink(r.name)),
    group ? el("td", {}, runsOn(r.name)) : null,
    el("td", { class: r.state === "running" ? "ok" : "bad" }, r.state),
    el("td", {}, r.kind), el("td", { class: "mono muted" }, r.hash),
    el("td", {}, String(r.handled)), el("td", {}, String(r.failed)), el("td", {}, String(r.dropped)),
    el("td", {}, r.handled + r.failed ? ms(r.latency.p50_ms) : ""), el("td", {}, r.handled + r.failed ? ms(r.latency.p99_ms) : ""),
    el("td", { class: "bad" }, r.last_error || ""),
    el("td", {}, r.next_retry ? when(r.next_retry) : "")));
  const h = doc.host;
  page("Rules",
    el("p", { class: "muted" }, `${h.notifications} notifications, ${h.loops_damped} damped, ${h.watched_keys} watched keys, ${h.timers} timers`,
      h.owned || h.standby ? `; group: ${h.owned} owned, ${h.standby} on standby` : "", doc.dry_run ? "; dry run: writes never reach the store" : ""),
    table(["rule", group ? "runs on" : null, "state", "kind", "version", "handled", "failed", "dropped", "p50", "p99", "last error", "next retry"].filter((h) => h !== null), rows),
    el("p", { class: "muted" }, "p50 and p99 are of the runs the console keeps per rule."));
}

async function rule(params) {
  const name = params.get("name");
  const doc = await api("/console/api/rule?" + q({ name }));
  const r = doc.rule;
  const hl = params.get("version");
  const perms = Object.keys(doc.permissions).length
    ? Object.entries(doc.permissions).map(([k, v]) => [el("span", {}, k), el("code", {}, v.length ? v.join(", ") : "(none)")])
    : [[el("span", {}, "all"), el("span", {}, "every key (no permissions set)")]];
  const runs = ["failed", "denied", "fenced", "dropped", "skipped", "handled"].filter((o) => doc.runs[o] && doc.runs[o].length)
    .map((o) => [el("h2", { class: outcomeClass(o) }, `${o} (last ${doc.runs[o].length})`),
      table(entryHead, doc.runs[o].map((e) => {
        const row = entryRow(e);
        if (hl && (e.writes || []).some((w) => w.version === hl)) row.classList.add("hl");
        return row;
      }))]);
  page("Rule " + r.name,
    el("div", { class: "grid" },
      el("span", {}, "state"), el("span", { class: r.state === "running" ? "ok" : "bad" }, r.state),
      el("span", {}, "kind, version"), el("span", {}, r.kind + ", " + r.hash),
      el("span", {}, "path"), el("code", {}, r.path),
      el("span", {}, "handled / failed / dropped / echoes"), el("span", {}, `${r.handled} / ${r.failed} / ${r.dropped} / ${r.echoes}`),
      el("span", {}, "p50 / p99"), el("span", {}, `${ms(doc.latency.p50_ms) || "-"} / ${ms(doc.latency.p99_ms) || "-"}`),
      el("span", {}, "last error"), el("span", { class: r.last_error ? "bad" : "muted" }, r.last_error || "none")),
    el("h2", {}, "Watches"), el("p", {}, r.watches.length ? r.watches.map((k, i) => [i ? ", " : "", el("code", {}, k)]) : "none"),
    el("h2", {}, "Permissions"), el("div", { class: "grid" }, perms),
    el("h2", {}, "Pending timers"), timerTable(doc.timers),
    el("h2", {}, "Recent runs"), runs.length ? runs : el("p", { class: "muted" }, "none yet"));
}

function timerTable(ts) {
  if (!ts.length) return el("p", { class: "muted" }, "none");
  return table(["rule", "name", "due", "every", "payload", ""], ts.map((t) => el("tr", {},
    el("td", {}, ruleLink(t.rule)), el("td", { class: "mono" }, t.name),
    el("td", {}, t.due ? new Date(t.due).toLocaleString() : "held for the next version"),
    el("td", {}, t.every_ms ? t.every_ms + " ms" : "once"), el("td", {}, t.payload_size + " B"),
    el("td", {}, t.firing ? "firing" : ""))));
}

function events(params) {
  const key = params.get("key") || "", ruleName = params.get("rule") || "";
  const body = el("tbody", { id: "events" });
  const status = el("span", { id: "skipped", class: "muted" });
  let paused = false, held = [], skipped = 0;
  const pause = el("button", { id: "pause", type: "button", onclick: () => {
    paused = !paused;
    pause.textContent = paused ? "Resume" : "Pause";
    if (!paused) { held.forEach(add); held = []; }
  } }, "Pause");
  const form = el("form", { class: "bar", onsubmit: (ev) => {
    ev.preventDefault();
    location.hash = "#/events?" + q({ key: form.key.value, rule: form.rule.value });
  } },
  el("label", {}, "key glob ", el("input", { name: "key", value: key, placeholder: "sensors/**" })),
  el("label", {}, "rule ", el("input", { name: "rule", value: ruleName, placeholder: "door.lua" })),
  el("button", { type: "submit" }, "Filter"), pause, status);
  const add = (e) => {
    body.prepend(entryRow(e));
    while (body.children.length > 500) body.lastChild.remove();
  };
  page("Live events", form,
    el("table", {}, el("thead", {}, el("tr", {}, entryHead.map((h) => el("th", {}, h)))), body));
  live = new EventSource("/console/api/stream?" + q({ key, rule: ruleName }));
  live.addEventListener("entry", (m) => {
    const e = JSON.parse(m.data);
    if (paused) { if (held.length < 500) held.push(e); else skipped++; } else add(e);
  });
  live.addEventListener("skipped", (m) => {
    skipped += JSON.parse(m.data).skipped;
    status.textContent = `sampled: ${skipped} events skipped at this rate`;
  });
  live.onerror = () => { document.getElementById("conn").textContent = "stream reconnecting…"; };
  live.onopen = () => { document.getElementById("conn").textContent = ""; };
}

// keys lists the store's keys: without the host's own (under $ssrun/)
// unless asked; on the broker's console a page at a time.
async function keys(params) {
  const pattern = params.get("pattern") || "*";
  const reserved = params.get("reserved") === "1" ? "1" : "";
  const after = params.get("after") || "";
  const form = el("form", { class: "bar", onsubmit: (ev) => {
    ev.preventDefault();
    location.hash = "#/keys?" + q({ pattern: form.pattern.value, reserved: form.reserved.checked ? "1" : "" });
  } }, el("label", {}, "pattern ", el("input", { name: "pattern", value: pattern })),
  el("label", {}, el("input", { type: "checkbox", name: "reserved", id: "reserved", checked: reserved === "1",
    onchange: () => form.requestSubmit() }), " show $ssrun/ keys"),
  el("button", { type: "submit" }, "Scan"));
  const detail = el("div", { id: "key" });
  const doc = await api("/console/api/keys?" + q({ pattern, reserved, after }));
  const rows = doc.keys.map((k) => el("tr", { class: "click", "data-key": k, onclick: () => showKey(k, detail) }, el("td", { class: "mono" }, k)));
  const note = (doc.hidden ? `, ${doc.hidden} under $ssrun/ hidden` : "") + (doc.more && !doc.next ? " (more not listed)" : "");
  const nav = el("p", { class: "bar", id: "pager" },
    after ? link("#/keys?" + q({ pattern, reserved }), "first page", { id: "first-page" }) : "",
    after && doc.next ? " · " : "",
    doc.next ? link("#/keys?" + q({ pattern, reserved, after: doc.next }), "next page", { id: "next-page" }) : "");
  page("Keys", form, detail, table([`${doc.keys.length} keys${after ? " on this page" : ""}${note}`], rows), nav);
  const key = params.get("key");
  if (key) showKey(key, detail);
}

async function showKey(key, into) {
  const d = await api("/console/api/key?" + q({ key }));
  const w = d.last_write;
  into.replaceChildren(el("h2", {}, "Key ", el("code", {}, key)), el("div", { class: "grid" },
    el("span", {}, "value"), d.found ? el("pre", { class: "mono" }, d.value) : el("span", { class: "muted" }, "not found"),
    el("span", {}, "encoding"), el("span", {}, d.hex ? "hex (not UTF-8)" : "text", d.truncated ? `, first bytes of ${d.size}` : ""),
    el("span", {}, "version"), el("code", {}, d.version || ""),
    (await pages).includes("why")
      ? [el("span", {}, "last rule write"), w ? el("span", {}, ruleLink(w.rule), " at " + when(w.at) + " ", link("#/why?" + q({ key }), "why")) : el("span", { class: "muted" }, "no rule wrote it (that the journal remembers)")]
      : [el("span", {}, "last writer"), d.writer ? el("code", { id: "writer" }, d.writer)
        : el("span", { class: "muted" }, d.found ? "unknown (written before the broker started)" : "")]));
}

// clients is the broker's page of its connected MQTT clients.
async function clients() {
  const doc = await api("/console/api/clients");
  const rows = doc.clients.map((c) => el("tr", { "data-client": c.id },
    el("td", { class: "mono" }, c.id), el("td", {}, c.username || ""), el("td", { class: "mono" }, c.remote),
    el("td", {}, when(c.since)), el("td", {}, c.session_expiry_s + " s"), el("td", {}, c.subscriptions),
    el("td", {}, c.inflight), el("td", {}, c.queued), el("td", {}, c.registrations)));
  page("Clients", table([`${doc.total} connected${doc.more ? ` (${doc.clients.length} listed)` : ""}`, "user", "remote", "since",
    "session expiry", "subscriptions", "in flight", "queued by the store", "KEYNOTIFY"], rows));
}

function keyForm(hash, key, extra) {
  const form = el("form", { class: "bar", onsubmit: (ev) => {
    ev.preventDefault();
    const p = { key: form.key.value };
    if (form.rule) p.rule = form.rule.value;
    location.hash = hash + "?" + q(p);
  } }, el("label", {}, "key ", el("input", { name: "key", value: key || "", required: true })), extra || "", el("button", { type: "submit" }, "Ask"));
  return form;
}

async function why(params) {
  const key = params.get("key");
  const form = keyForm("#/why", key);
  if (!key) return page("Why", form);
  let w;
  try {
    w = await api("/why?" + q({ key }));
  } catch (err) {
    return page("Why", form, el("p", { class: "bad" }, err.message));
  }
  const hops = [];
  if (w.origin) {
    hops.push(el("div", { class: "hop origin" },
      el("span", { class: "who" }, w.origin.client ? "client " + w.origin.client : "outside the rules"),
      el("span", { class: "mono" }, w.origin.op + " " + w.origin.key), el("br"),
      el("span", { class: "mono muted" }, w.origin.version || "")));
  } else {
    hops.push(el("div", { class: "hop origin" }, el("span", { class: "who" }, "a timer, a lost lock or a write outside a handler")));
  }
  for (const s of w.chain || []) {
    hops.push(el("span", { class: "arrow" }, "→"));
    hops.push(el("div", { class: "hop", "data-rule": s.rule },
      el("span", { class: "who" }, link("#/rule?" + q({ name: s.rule, version: s.version }), s.rule)),
      el("span", { class: "mono" }, s.op + " ", whyLink(s.key)), el("br"),
      el("span", { class: "mono muted" }, s.version || "")));
  }
  page("Why " + key, form,
    el("div", { class: "chain", id: "chain" }, hops),
    el("div", { class: "grid" },
      el("span", {}, "value"), el("code", {}, w.value + (w.truncated ? ` … (${w.value_size} bytes)` : "")),
      el("span", {}, "written by"), el("span", {}, ruleLink(w.rule), " at " + new Date(w.at).toLocaleString()),
      el("span", {}, "handling"), el("span", {}, w.event.op + " ", el("code", {}, w.event.key), " ", by({ by_rule: w.event.rule, by_client: w.event.client }))));
}

async function whynot(params) {
  const key = params.get("key"), ruleName = params.get("rule");
  const doc = await api("/console/api/rules");
  const select = el("select", { name: "rule" }, doc.rules.map((r) => el("option", { value: r.name, selected: r.name === ruleName }, r.name)));
  const form = keyForm("#/whynot", key, el("label", {}, "rule ", select));
  if (!key || !ruleName) return page("Why not", form, el("p", { class: "muted" }, "Why did a rule not react to a key's last change?"));
  const w = await api("/whynot?" + q({ key, rule: ruleName }));
  page("Why not", form,
    el("p", {}, "Why ", ruleLink(ruleName), " did not react to ", el("code", {}, key), ":"),
    el("div", { id: "reasons" }, w.reasons.map((r, i) => el("div", { class: "reason" + (i === 0 ? " first" : "") + (r.code === "reacted" ? " reacted" : ""), "data-code": r.code },
      el("strong", {}, r.code), " ", r.text))));
}

async function timers() {
  const doc = await api("/console/api/timers");
  page("Timers", timerTable(doc.timers));
}

async function group() {
  const doc = await api("/console/api/group");
  if (!doc.in_group) return page("Group", el("p", { class: "muted" }, "This host is not in a group (ssrun run --group NAME)."));
  const g = doc.group;
  const list = (xs) => (xs && xs.length ? xs.map((x, i) => [i ? ", " : "", el("code", {}, x)]) : "none");
  page("Group " + g.Name, el("div", { class: "grid" },
    el("span", {}, "this host"), el("code", {}, g.Member),
    el("span", {}, "members"), el("span", {}, list(g.Members)),
    el("span", {}, "owned here"), el("span", {}, list(g.Owned)),
    el("span", {}, "run by another host"), el("span", {}, list(g.Standby)),
    el("span", {}, "withdrawn"), el("span", {}, list(g.Withdrawn)),
    el("span", {}, "takeovers / handovers / lost"), el("span", {}, `${g.Takeovers} / ${g.Handovers} / ${g.Lost}`)));
}

const routes = { rules, rule, events, keys, why, whynot, timers, group, clients };

// pages are this console's (GET /console/api/pages): the rules' or the
// broker's; the menu shows only those, and the first is the default.
const pages = api("/console/api/pages").then((d) => d.pages, () => ["rules"]);

async function route() {
  if (live) { live.close(); live = null; }
  const mine = await pages;
  const [path, query] = (location.hash.slice(1) || "/" + mine[0]).split("?");
  let name = path.replace(/^\//, "") || mine[0];
  if (!mine.includes(name) && !(name === "rule" && mine.includes("rules"))) name = mine[0];
  for (const a of document.querySelectorAll("#nav a")) {
    const href = a.getAttribute("href");
    a.hidden = !mine.includes(href.slice(2));
    a.classList.toggle("on", href === "#/" + name);
  }
  const fn = routes[name];
  try {
    await fn(new URLSearchParams(query || ""));
  } catch (err) {
    page("Error", el("p", { class: "bad" }, err.message));
  }
}

window.addEventListener("hashchange", route);
route();
