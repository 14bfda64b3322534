// broker console: plain DOM, no framework, no build step.
// Every agent-supplied string goes into the page through textContent (or a
// text node) only: nothing an agent writes is ever parsed as HTML, and the
// Content-Security-Policy allows no inline script or style besides.
// Live views come over Server-Sent Events (read with fetch, so the key travels
// in a header): the log, the space's state (participants, holds, queues) and
// the list of spaces. Nothing here polls the server.
"use strict";

const KEY = "brokerOperatorKey";
const TAIL = 200; // messages loaded when a space opens, and per "load earlier"
const KEEP = 5000; // messages kept in the page
const $ = (id) => document.getElementById(id);

const KIND_WORDS = {
  direct: "message", broadcast: "to everyone", post: "board post",
  directive: "standing instruction", retract: "lifted an instruction",
  operator: "operator", seen: "read receipt",
};
const VIA_WORDS = { cp: "from the console", cli: "from the command line", mcp: "through MCP" };
const REASON_WORDS = {
  unknown_participant: "no such participant", no_live_participant: "nobody live matches",
  no_parent: "has no parent", no_lead: "no lead here", participant_left: "has left",
  inbox_full: "inbox full", broadcast_full: "too many unread broadcasts",
  sender_share: "sender's share of that inbox used up", contact_policy: "does not take messages from this sender",
};
const STATUS_WORDS = { running: "running", idle: "idle", failed: "failed", shutdown: "shut down", left: "left" };

let spacesCtl = null; // AbortController of the spaces stream
let spaceCtl = null; // AbortController of the open space's streams
let S = null; // the open space's state in the page (see openSpace)

// --- small helpers -----------------------------------------------------------------
function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function button(label, onClick, cls, id) {
  const b = el("button", label, cls || "quiet");
  b.type = "button";
  if (id) b.dataset.key = id;
  b.addEventListener("click", onClick);
  return b;
}

function key() { return sessionStorage.getItem(KEY); }

function narrow() { return window.matchMedia("(max-width: 720px)").matches; }

function utc(iso) { return iso ? iso.replace("T", " ").replace(/\.(\d{3})\d*Z$/, ".$1 UTC") : ""; }

// A stored time as the operator reads it: local, short; UTC on hover.
function when(iso, cls) {
  const node = el("time", null, cls || "when");
  if (!iso) return node;
  const d = new Date(iso);
  node.dateTime = iso;
  node.title = utc(iso);
  const today = new Date();
  const sameDay = d.toDateString() === today.toDateString();
  const opts = sameDay ? { hour: "2-digit", minute: "2-digit", second: "2-digit" }
    : { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" };
  node.textContent = d.toLocaleString(undefined, opts);
  return node;
}

function inWords(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.round(s / 60) + " min";
  if (s < 86400) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " d";
}

// "in 4 min" / "5 s ago", against the store's clock of the last reading.
function relative(iso, cls) {
  const node = when(iso, cls || "rel");
  if (!iso) return node;
  const now = S && S.clock ? S.clock() : Date.now();
  const delta = (new Date(iso).getTime() - now) / 1000;
  node.textContent = delta >= 0 ? "in " + inWords(delta) : inWords(-delta) + " ago";
  return node;
}

function reason(code) { return REASON_WORDS[code] || code; }

async function api(method, path, body) {
  const init = { method, headers: { Authorization: "Bearer " + key() } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const err = new Error(data && data.message ? data.message : res.statusText);
    err.code = data && data.error; err.status = res.status;
    if (res.status === 401) showLogin("That key was refused: " + err.message);
    throw err;
  }
  return data;
}

function failure(err) { return (err.code ? err.code + ": " : "") + err.message; }

// --- Server-Sent Events over fetch, reconnecting ---------------------------------------
async function subscribe(path, ctl, onEvent, opts) {
  opts = opts || {};
  while (!ctl.signal.aborted) {
    try {
      const headers = { Authorization: "Bearer " + key() };
      if (opts.resume) headers["Last-Event-ID"] = String(opts.resume());
      const res = await fetch(path, { headers, signal: ctl.signal });
      if (res.status === 401) { showLogin("The key was refused."); return; }
      if (!res.ok) throw new Error("stream: " + res.status);
      if (opts.onOpen) opts.onOpen();
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
          const ev = parseEvent(block);
          if (ev.data && onEvent(ev.event, JSON.parse(ev.data)) === false) return;
        }
      }
    } catch (err) {
      if (ctl.signal.aborted) return;
    }
    if (opts.onDrop) opts.onDrop();
    await new Promise((r) => setTimeout(r, 1000));
  }
}

function parseEvent(block) {
  const ev = { event: "message", data: "" };
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) ev.event = line.slice(6).trim();
    else if (line.startsWith("data:")) ev.data += line.slice(5).replace(/^ /, "");
  }
  return ev;
}

function setStatus(text, cls) { const s = $("status"); s.textContent = text; s.className = "status " + (cls || ""); }

// --- login and the spaces ---------------------------------------------------------------
function showLogin(message) {
  sessionStorage.removeItem(KEY);
  if (spacesCtl) spacesCtl.abort();
  if (spaceCtl) spaceCtl.abort();
  S = null;
  $("app").hidden = true; $("forget").hidden = true; $("login").hidden = false;
  $("login-error").textContent = message || "";
  setStatus("");
  $("key").focus();
}

function start() {
  if (!key()) { showLogin(); return; }
  $("login").hidden = true; $("app").hidden = false; $("forget").hidden = false;
  if (spacesCtl) spacesCtl.abort();
  spacesCtl = new AbortController();
  subscribe("/api/spaces/stream", spacesCtl, (event, data) => {
    if (event === "spaces") showSpaces(data);
  }, { onOpen: () => setStatus("live", "ok"), onDrop: () => setStatus("reconnecting…", "warn") });
  const wanted = hashSpace();
  if (wanted) openSpace(wanted);
}

function hashSpace() { return new URLSearchParams(location.hash.slice(1)).get("space"); }

function showSpaces(spaces) {
  const list = $("spaces");
  list.replaceChildren();
  const ordered = spaces.slice().sort((a, b) => (a.created_at_utc < b.created_at_utc ? 1 : -1)); // newest first
  for (const s of ordered) {
    const li = el("li");
    const a = el("a", null, "space-link");
    a.href = "#space=" + encodeURIComponent(s.id);
    a.dataset.id = s.id;
    a.append(el("span", s.id, "id"), el("span", s.kind, "kind"), el("span", s.state, "badge " + s.state));
    a.title = s.kind + " · " + s.state + " · created " + utc(s.created_at_utc);
    if (S && S.id === s.id) a.setAttribute("aria-current", "true");
    li.append(a);
    list.append(li);
    if (S && S.id === s.id && S.space && S.space.state !== s.state) { S.space = s; showSpaceHead(); }
  }
  $("spaces-count").textContent = String(spaces.length);
  $("spaces-empty").hidden = spaces.length > 0;
}

// --- one space ----------------------------------------------------------------------------
async function openSpace(id) {
  let space;
  try {
    space = await api("GET", "/api/spaces/" + encodeURIComponent(id));
  } catch (err) {
    $("pick").hidden = false; $("pick").textContent = "Cannot open " + id + ": " + failure(err);
    return;
  }
  if (spaceCtl) spaceCtl.abort();
  spaceCtl = new AbortController();
  S = {
    id: space.id, space, entries: new Map(), first: null, last: 0, seenBy: new Map(),
    board: new Map(), state: null, threads: [], unseen: 0, atBottom: true, offset: 0,
    clock: () => Date.now() + S.offset, quarantined: -1,
  };
  for (const a of document.querySelectorAll(".space-link")) {
    if (a.dataset.id === space.id) a.setAttribute("aria-current", "true"); else a.removeAttribute("aria-current");
  }
  $("pick").hidden = true; $("space").hidden = false;
  if (narrow()) { $("spaces-box").open = false; $("filter-box").open = false; }
  $("log").replaceChildren(); $("hits").replaceChildren(); $("hits").hidden = true; $("log").hidden = false;
  for (const id of ["people", "claims", "reservations", "journal", "threads", "quarantine"]) $(id).replaceChildren();
  $("directives").replaceChildren(); $("posts").replaceChildren();
  $("send-result").textContent = ""; $("summary").textContent = "";
  clearFilters(false);
  showSpaceHead();
  showTab("messages");
  const ctl = spaceCtl;
  await loadTail(ctl);
  if (ctl.signal.aborted) return;
  subscribe(base() + "/messages/stream", ctl, (event, data) => {
    if (event === "message") { if (data.seq > S.last) addEntries([data], true); }
    else if (event === "end") $("filter-state").textContent = "The space is no longer running: the log is complete.";
    return ctl.signal.aborted ? false : undefined;
  }, { resume: () => S.last });
  subscribe(base() + "/state/stream", ctl, (event, data) => {
    if (event === "state") showState(data);
    else if (event === "gone") { $("summary").textContent = "This space is gone: " + data.message; return false; }
    return ctl.signal.aborted ? false : undefined;
  });
  loadBoard(ctl); loadThreads();
}

const base = () => "/api/spaces/" + encodeURIComponent(S.id);

function showSpaceHead() {
  const sp = S.space;
  $("space-title").textContent = sp.id;
  $("space-title").title = sp.kind + ", created " + utc(sp.created_at_utc);
  $("space-state").textContent = sp.kind + " · " + sp.state;
  $("space-state").className = "badge " + sp.state;
  const running = sp.state === "running";
  $("stop-space").hidden = !running;
  $("archive-space").hidden = sp.state === "archived";
  $("rotate-key").hidden = !running;
  $("send-form").hidden = !running;
}

// --- the log -------------------------------------------------------------------------------
async function loadTail(ctl) {
  try {
    const rows = await api("GET", base() + "/messages?tail=" + TAIL);
    if (ctl.signal.aborted) return;
    addEntries(rows, false);
    $("load-earlier").hidden = !(S.first > 1);
    scrollToEnd();
  } catch (err) {
    $("filter-state").textContent = "Could not read the log: " + failure(err);
  }
}

async function loadEarlier() {
  if (!S || !S.first || S.first <= 1) return;
  const after = Math.max(0, S.first - 1 - TAIL);
  const rows = await api("GET", base() + "/messages?after_seq=" + after + "&limit=" + (S.first - 1 - after));
  const box = $("log-box"); const before = box.scrollHeight;
  const nodes = rows.map((e) => { S.entries.set(e.seq, e); noteReceipt(e); return entryNode(e); });
  $("log").prepend(...nodes);
  if (rows.length) S.first = rows[0].seq;
  for (const e of rows) refreshSeen(e);
  box.scrollTop += box.scrollHeight - before; // keep what the operator was reading in place
  $("load-earlier").hidden = !(S.first > 1);
  applyFilters();
}

function addEntries(rows, live) {
  if (!rows.length) return;
  const log = $("log");
  const stick = following();
  let shownNew = 0;
  for (const e of rows) {
    if (S.entries.has(e.seq)) continue;
    S.entries.set(e.seq, e);
    if (S.first === null || e.seq < S.first) S.first = e.seq;
    if (e.seq > S.last) S.last = e.seq;
    noteReceipt(e);
    const node = entryNode(e);
    log.append(node);
    if (!node.hidden) shownNew += 1;
    if (live) boardEntry(e);
    if (live && e.thread) threadsSoon();
  }
  while (log.children.length > KEEP) {
    const gone = log.firstElementChild; S.entries.delete(Number(gone.dataset.seq)); gone.remove();
    S.first = Number(log.firstElementChild.dataset.seq); $("load-earlier").hidden = false;
  }
  addSenders(rows);
  if (!live) return;
  if (stick) scrollToEnd();
  else if (shownNew) { S.unseen += shownNew; showJump(); }
}

function entryNode(e) {
  const li = el("li", null, "entry kind-" + e.kind + (e.urgent ? " urgent" : ""));
  li.dataset.seq = e.seq; li.dataset.id = e.id; li.dataset.sender = e.sender; li.dataset.kind = e.kind;
  if (e.thread) li.dataset.thread = e.thread;
  const head = el("div", null, "meta");
  const who = el("span", null, "who");
  who.append(el("b", e.sender === "operator" ? "operator" : e.sender, "sender"));
  if (e.kind !== "seen" && e.kind !== "retract") {
    const to = (e.to && e.to.length) ? e.to.join(", ") : (e.kind === "post" ? "the board" : "");
    if (to) who.append(el("span", " → " + to, "to"));
  }
  head.append(who);
  const tags = el("span", null, "tags");
  if (e.urgent) tags.append(el("span", "URGENT", "tag urgent"));
  if (e.kind !== "direct") tags.append(el("span", KIND_WORDS[e.kind] || e.kind, "tag kind"));
  if (e.via) tags.append(el("span", VIA_WORDS[e.via] || e.via, "tag via"));
  if (e.thread) tags.append(el("span", "# " + e.thread, "tag thread"));
  if (e.importance && e.importance !== "normal") tags.append(el("span", e.importance, "tag"));
  head.append(tags, when(e.created_at_utc));
  li.append(head);
  if (e.kind === "seen") {
    let ids = [];
    try { ids = JSON.parse(e.body); } catch (_) { ids = []; }
    li.append(el("div", "read " + ids.length + " message" + (ids.length === 1 ? "" : "s"), "body muted"));
  } else if (e.kind === "retract") {
    li.append(el("div", "lifted the standing instruction " + (e.ref || ""), "body muted"));
  } else {
    li.append(el("div", e.body, "body"));
  }
  const out = el("div", null, "outcome");
  if (e.reached && e.reached.length) out.append(el("span", "delivered to " + e.reached.join(", "), "reached"));
  if (e.not_reached && e.not_reached.length) {
    out.append(el("span", "not delivered: " +
      e.not_reached.map((n) => n.address + " (" + reason(n.reason) + ")").join(", "), "missed"));
  }
  if (!out.childNodes.length && e.kind === "post") out.append(el("span", "on the board", "muted"));
  if (!out.childNodes.length && e.kind === "operator") out.append(el("span", "recorded for the log", "muted"));
  const seen = el("span", null, "seen"); out.append(seen);
  if (out.childNodes.length) li.append(out);
  li.hidden = !matches(e);
  refreshSeenNode(li, e.id);
  return li;
}

// Read receipts are folded into the messages they acknowledge ("seen by …").
function noteReceipt(e) {
  if (e.kind !== "seen") return;
  let ids = [];
  try { ids = JSON.parse(e.body); } catch (_) { return; }
  for (const id of ids) {
    if (!S.seenBy.has(id)) S.seenBy.set(id, new Set());
    S.seenBy.get(id).add(e.sender);
    const node = $("log").querySelector('li[data-id="' + CSS.escape(id) + '"]');
    if (node) refreshSeenNode(node, id);
  }
}

function refreshSeen(e) {
  const node = $("log").querySelector('li[data-seq="' + e.seq + '"]');
  if (node) refreshSeenNode(node, e.id);
}

function refreshSeenNode(node, id) {
  const who = S.seenBy.get(id);
  const span = node.querySelector(".seen");
  if (span) span.textContent = who && who.size ? "seen by " + Array.from(who).join(", ") : "";
}

// --- following the newest: auto-scroll until the operator scrolls up ---------------------
function atEnd() { const b = $("log-box"); return b.scrollHeight - b.scrollTop - b.clientHeight < 40; }

// Whether new messages scroll into view: where the box is scrolled to now, not the last
// scroll event's word (that event comes a frame later: messages arriving in between would
// drag an operator who just scrolled up back down). A hidden box keeps the last word.
function following() {
  if ($("log-box").clientHeight) S.atBottom = atEnd();
  return S.atBottom;
}

function scrollToEnd() {
  const b = $("log-box");
  b.scrollTop = b.scrollHeight;
  S.atBottom = true; S.unseen = 0; $("jump").hidden = true;
}

function showJump() {
  const j = $("jump");
  j.textContent = S.unseen + " new message" + (S.unseen === 1 ? "" : "s") + " below ↓";
  j.hidden = false;
}

// --- filters and search -----------------------------------------------------------------------
function filters() {
  return {
    sender: $("f-sender").value, kind: $("f-kind").value, thread: $("f-thread").value,
    receipts: $("f-receipts").checked || $("f-kind").value === "seen",
  };
}

function matches(e) {
  const f = filters();
  if (e.kind === "seen" && !f.receipts) return false;
  if (f.sender && e.sender !== f.sender) return false;
  if (f.kind && e.kind !== f.kind) return false;
  if (f.thread && e.thread !== f.thread) return false;
  return true;
}

function applyFilters() {
  if (!S) return;
  let shown = 0;
  for (const li of $("log").children) {
    const e = S.entries.get(Number(li.dataset.seq));
    li.hidden = !e || !matches(e);
    if (!li.hidden) shown += 1;
  }
  const f = filters();
  const active = f.sender || f.kind || f.thread;
  $("filter-state").textContent = active ? shown + " of the " + S.entries.size + " loaded messages match" : "";
  scrollToEnd();
}

function clearFilters(apply) {
  $("f-sender").value = ""; $("f-kind").value = ""; $("f-thread").value = "";
  $("f-text").value = ""; $("f-receipts").checked = false;
  const f = filters();
  if (f.sender || f.kind || f.thread) $("filter-box").open = true;
  $("hits").hidden = true; $("log").hidden = false; $("filter-state").textContent = "";
  if (apply !== false) applyFilters();
}

function addSenders(rows) {
  const select = $("f-sender");
  const have = new Set(Array.from(select.options).map((o) => o.value));
  for (const e of rows) {
    if (have.has(e.sender)) continue;
    have.add(e.sender);
    const o = el("option", e.sender); o.value = e.sender; select.append(o);
  }
}

async function search(text) {
  const hits = $("hits");
  if (!text.trim()) { hits.hidden = true; $("log").hidden = false; applyFilters(); return; }
  const f = filters();
  const q = new URLSearchParams({ query: text, limit: "50" });
  if (f.sender) q.set("from", f.sender);
  if (f.kind) q.append("kind", f.kind);
  try {
    const found = await api("GET", base() + "/search?" + q.toString());
    hits.replaceChildren(...found.filter((h) => !f.thread || h.thread === f.thread).map(hitNode));
    $("filter-state").textContent = found.length ? found.length + " found, best first" : "Nothing found for that search.";
  } catch (err) {
    hits.replaceChildren();
    $("filter-state").textContent = "Search refused: " + failure(err);
  }
  hits.hidden = false; $("log").hidden = true;
}

function hitNode(h) {
  const li = el("li", null, "entry hit");
  const head = el("div", null, "meta");
  head.append(el("b", h.sender, "sender"), el("span", " → " + (h.to || []).join(", "), "to"));
  const tags = el("span", null, "tags");
  if (h.kind !== "direct") tags.append(el("span", KIND_WORDS[h.kind] || h.kind, "tag kind"));
  if (h.thread) tags.append(el("span", "# " + h.thread, "tag thread"));
  head.append(tags, when(h.created_at_utc));
  // The snippet marks the words found between [ and ]: shown as <mark>, as text.
  const body = el("div", null, "body");
  const parts = h.snippet.split(/(\[[^\]]*\])/);
  for (const part of parts) {
    if (part.startsWith("[") && part.endsWith("]")) body.append(el("mark", part.slice(1, -1)));
    else if (part) body.append(document.createTextNode(part));
  }
  li.append(head, body);
  return li;
}

// --- the space's state: participants, holds, queues ---------------------------------------
function showState(st) {
  S.state = st;
  S.offset = new Date(st.activity.at_utc).getTime() - Date.now();
  if (st.space.state !== S.space.state) { S.space = st.space; showSpaceHead(); }
  const live = st.participants.filter((p) => p.status === "running" || p.status === "idle");
  const a = st.activity;
  const sum = (k) => a.inboxes.reduce((n, i) => n + i[k], 0);
  const quarantined = sum("quarantined");
  $("summary").textContent = live.length + " live of " + st.participants.length + " participants · " +
    sum("waiting") + " waiting · " + sum("in_flight") + " in flight · " + quarantined + " quarantined · " +
    a.sent_last_minute + " sent in the last minute";
  $("people-count").textContent = String(live.length);
  $("board-count").textContent = String(st.claims.length + st.reservations.length);
  $("quarantine-count").textContent = quarantined ? String(quarantined) : "";
  showPeople();
  showHolds();
  const list = $("addresses");
  list.replaceChildren(...["lead", "broadcast", ...live.map((p) => p.address),
    ...new Set(live.map((p) => "role:" + p.agent))].map((v) => { const o = el("option"); o.value = v; return o; }));
  if (quarantined !== S.quarantined) { S.quarantined = quarantined; loadQuarantine(); }
  if ($("journal-box").open) loadJournal();
}

// Tables are redrawn on every reading: the focused button (by its data-key) keeps the focus.
function table(node, headers, rows, empty) {
  const focused = node.contains(document.activeElement) ? document.activeElement.dataset.key : null;
  node.replaceChildren();
  const head = el("tr");
  for (const h of headers) { const th = el("th", h); th.scope = "col"; head.append(th); }
  const thead = el("thead"); thead.append(head);
  const body = el("tbody");
  if (!rows.length) {
    const tr = el("tr"); const td = el("td", empty || "none", "muted"); td.colSpan = headers.length; tr.append(td); body.append(tr);
  }
  for (const cells of rows) {
    const tr = el("tr");
    if (cells.cls) tr.className = cells.cls;
    for (const c of cells) {
      const td = el("td");
      if (c instanceof Node) td.append(c); else td.textContent = c == null ? "" : String(c);
      tr.append(td);
    }
    body.append(tr);
  }
  node.append(thead, body);
  if (focused) { const again = node.querySelector('[data-key="' + CSS.escape(focused) + '"]'); if (again) again.focus(); }
}

function showPeople() {
  if (!S.state) return;
  const queues = new Map(S.state.activity.inboxes.map((i) => [i.address, i]));
  const all = $("show-left").checked;
  const rows = S.state.participants.filter((p) => all || p.status !== "left").map((p) => {
    const q = queues.get(p.address) || { waiting: 0, in_flight: 0, retried: 0, quarantined: 0, sent_last_minute: 0 };
    const status = el("span", STATUS_WORDS[p.status] || p.status, "badge " + p.status);
    const row = [p.address, p.agent, p.role || "", status, q.waiting, q.in_flight, q.retried, q.quarantined,
      q.sent_last_minute, relative(p.last_seen_utc)];
    row.cls = "status-" + p.status;
    return row;
  });
  table($("people"), ["address", "agent", "role", "status", "waiting", "in flight", "retried", "quarantined",
    "sent / min", "last seen"], rows, "nobody has joined yet");
}

function showHolds() {
  const st = S.state;
  table($("claims"), ["key", "holder", "fence", "claimed", "expires", ""], st.claims.map((c) => [
    c.key, c.holder, c.fence, when(c.claimed_at_utc), relative(c.expires_at),
    button("Release", () => confirmAction({
      title: "Release the claim on " + c.key + "?",
      text: c.holder + " holds it (fence " + c.fence + "). Its fence goes stale: its next renew or release is refused.",
      ok: "Release claim", reason: true,
      run: (why) => api("POST", base() + "/claims/release", { key: c.key, fence: c.fence, reason: why || null }),
    }), "quiet", "claim " + c.fence + " " + c.key),
  ]), "no key is claimed");
  table($("reservations"), ["pattern", "mode", "holder", "fence", "expires", "why", ""], st.reservations.map((r) => [
    r.pattern, r.mode, r.holder, r.fence, relative(r.expires_at), r.reason || "",
    button("Release", () => confirmAction({
      title: "Release the reservation of " + r.pattern + "?",
      text: r.holder + " holds it " + r.mode + " (fence " + r.fence + "). Commits on these paths are no longer refused for it.",
      ok: "Release reservation", reason: true,
      run: (why) => api("POST", base() + "/reservations/release", { fence: r.fence, reason: why || null }),
    }), "quiet", "reservation " + r.fence),
  ]), "no path is reserved");
}

// --- the board: standing instructions and posts (from the log) -------------------------------
async function loadBoard(ctl) {
  try {
    let after = null;
    for (;;) {
      const q = "/board/view?limit=1000" + (after ? "&after=" + encodeURIComponent(after) : "");
      const page = await api("GET", base() + q);
      if (ctl.signal.aborted) return;
      for (const b of page) S.board.set(b.id, b);
      if (page.length < 1000) break;
      after = page[page.length - 1].id;
    }
    showBoard();
  } catch (err) {
    $("posts").replaceChildren(el("li", "Could not read the board: " + failure(err), "error"));
  }
}

function boardEntry(e) {
  if (e.kind !== "post" && e.kind !== "directive" && e.kind !== "retract") return;
  const b = { id: e.id, seq: e.seq, kind: e.kind, sender: e.sender, to: e.to, body: e.body, ref: e.ref,
    reached: e.reached, in_force: e.kind === "directive" ? true : null, created_at_utc: e.created_at_utc };
  S.board.set(e.id, b);
  if (e.kind === "retract" && S.board.has(e.ref)) S.board.get(e.ref).in_force = false;
  showBoard();
}

function showBoard() {
  const items = Array.from(S.board.values()).sort((x, y) => y.seq - x.seq); // newest first
  const directives = items.filter((b) => b.kind === "directive");
  $("directives").replaceChildren(...(directives.length ? directives.map(directiveNode)
    : [el("li", "no standing instruction", "muted")]));
  const posts = items.filter((b) => b.kind === "post").slice(0, 100);
  $("posts").replaceChildren(...(posts.length ? posts.map((b) => {
    const li = el("li", null, "card");
    const head = el("div", null, "meta");
    head.append(el("b", b.sender, "sender"), el("span", (b.to && b.to.length) ? " → " + b.to.join(", ") : "", "to"),
      when(b.created_at_utc));
    li.append(head, el("div", b.body, "body"));
    return li;
  }) : [el("li", "no post", "muted")]));
}

function directiveNode(b) {
  const li = el("li", null, "card" + (b.in_force ? "" : " lifted"));
  li.dataset.id = b.id;
  const head = el("div", null, "meta");
  head.append(el("b", b.sender, "sender"), el("span", " → " + (b.to || []).join(", "), "to"),
    el("span", b.in_force ? "in force" : "lifted", "badge " + (b.in_force ? "running" : "stopped")),
    when(b.created_at_utc));
  li.append(head, el("div", b.body, "body"));
  if (b.in_force && S.space.state === "running") {
    li.append(button("Lift", () => confirmAction({
      title: "Lift this standing instruction?",
      text: "From " + b.sender + ": it is no longer shown on its recipients' turns. The log records that the operator lifted it.",
      ok: "Lift instruction",
      run: () => api("POST", base() + "/board/retract", { directive_id: b.id }),
    })));
  }
  return li;
}

async function loadJournal() {
  try {
    const rows = await api("GET", base() + "/claims/journal");
    const shown = rows.slice(-200).reverse();
    table($("journal"), ["time", "event", "what", "holder", "fence", "why"], shown.map((j) => [
      when(j.at_utc), j.event, j.key.startsWith("path ") ? "path " + j.key.slice(5) : "key " + j.key,
      j.owner, j.fence, j.reason || "",
    ]), "nothing yet");
  } catch (err) {
    table($("journal"), ["error"], [[failure(err)]]);
  }
}

// --- threads and quarantine -----------------------------------------------------------------
let threadsTimer = null;
function threadsSoon() { clearTimeout(threadsTimer); threadsTimer = setTimeout(loadThreads, 300); }

async function loadThreads() {
  if (!S) return;
  try {
    S.threads = await api("GET", base() + "/threads");
  } catch (err) { return; }
  $("threads-count").textContent = S.threads.length ? String(S.threads.length) : "";
  table($("threads"), ["thread", "messages", "who", "started", "last", ""], S.threads.map((t) => [
    t.thread, t.messages, t.senders.join(", "), when(t.first_at), when(t.last_at),
    button("Show", () => { $("f-thread").value = t.thread; showTab("messages"); applyFilters(); }),
  ]), "no thread yet: a message with a thread name or a reply starts one");
  const select = $("f-thread"); const keep = select.value;
  select.replaceChildren(el("option", "any"));
  select.firstChild.value = "";
  for (const t of S.threads) { const o = el("option", t.thread); o.value = t.thread; select.append(o); }
  select.value = keep;
}

async function loadQuarantine() {
  if (!S) return;
  let held;
  try { held = await api("GET", base() + "/quarantine"); } catch (err) { return; }
  $("requeue-all").hidden = held.length === 0;
  $("requeue-all").onclick = () => confirmAction({
    title: "Requeue all " + held.length + " quarantined deliveries?",
    text: "Each goes back to its inbox, ready for the next claim.", ok: "Requeue all",
    run: () => api("POST", base() + "/quarantine/requeue", { ids: held.map((q) => q.delivery_id) }),
  });
  table($("quarantine"), ["for", "from", "message", "tries", "why", "last error", ""], held.map((q) => [
    q.recipient, q.sender, q.body, q.deliveries, q.reason || "", q.last_error || "",
    button("Requeue", () => confirmAction({
      title: "Requeue this delivery to " + q.recipient + "?",
      text: "It goes back to the inbox, ready for the next claim.", ok: "Requeue",
      run: () => api("POST", base() + "/quarantine/requeue", { ids: [q.delivery_id] }),
    }), "quiet", "requeue " + q.delivery_id),
  ]), "nothing is quarantined");
}

// --- tabs -------------------------------------------------------------------------------
function showTab(name) {
  for (const b of document.querySelectorAll(".tabs [role=tab]")) {
    const on = b.dataset.tab === name;
    b.setAttribute("aria-selected", on ? "true" : "false");
    b.tabIndex = on ? 0 : -1;
  }
  for (const t of document.querySelectorAll(".tab")) t.hidden = t.id !== "tab-" + name;
  if (name === "messages" && S && S.atBottom) scrollToEnd();
}

// --- confirmation dialogs ----------------------------------------------------------------
let pending = null;
function confirmAction(opts) {
  const d = $("confirm");
  pending = opts;
  $("confirm-title").textContent = opts.title;
  $("confirm-text").textContent = opts.text || "";
  $("confirm-ok").textContent = opts.ok;
  $("confirm-ok").disabled = false;
  $("confirm-error").textContent = "";
  $("confirm-reason-label").hidden = !opts.reason;
  $("confirm-reason").value = "";
  d.showModal();
  (opts.reason ? $("confirm-reason") : $("confirm-cancel")).focus();
}

async function confirmed(ev) {
  ev.preventDefault();
  if (!pending) return;
  const opts = pending;
  $("confirm-ok").disabled = true;
  try {
    const result = await opts.run($("confirm-reason").value.trim());
    pending = null;
    $("confirm").close();
    if (opts.done) opts.done(result);
    if (opts.reload) opts.reload();
  } catch (err) {
    $("confirm-error").textContent = failure(err);
    $("confirm-ok").disabled = false;
  }
}

function showSecret(value) {
  $("secret-value").textContent = value;
  $("secret").showModal();
  $("secret-close").focus();
}

// --- wiring ---------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, $("key").value.trim());
    $("key").value = "";
    start();
  });
  $("forget").addEventListener("click", () => showLogin());

  const tabs = Array.from(document.querySelectorAll(".tabs [role=tab]"));
  for (const b of tabs) {
    b.addEventListener("click", () => showTab(b.dataset.tab));
    b.addEventListener("keydown", (ev) => { // arrow keys move between tabs
      const i = tabs.indexOf(b);
      const next = ev.key === "ArrowRight" ? tabs[(i + 1) % tabs.length]
        : ev.key === "ArrowLeft" ? tabs[(i + tabs.length - 1) % tabs.length] : null;
      if (next) { ev.preventDefault(); showTab(next.dataset.tab); next.focus(); }
    });
  }

  // The box changes height (the summary wraps, a filter opens, the window turns):
  // an operator reading the newest keeps reading the newest.
  new ResizeObserver(() => { if (S && S.atBottom) scrollToEnd(); }).observe($("log-box"));
  $("log-box").addEventListener("scroll", () => {
    if (!S) return;
    S.atBottom = atEnd();
    if (S.atBottom) { S.unseen = 0; $("jump").hidden = true; }
  });
  $("jump").addEventListener("click", () => { scrollToEnd(); $("send-text").focus(); });
  $("load-earlier").addEventListener("click", () => loadEarlier().catch((err) => {
    $("filter-state").textContent = "Could not load earlier messages: " + failure(err);
  }));

  for (const id of ["f-sender", "f-kind", "f-thread", "f-receipts"]) {
    $(id).addEventListener("change", () => { if ($("f-text").value.trim()) search($("f-text").value); else applyFilters(); });
  }
  let searchTimer = null;
  $("f-text").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => search($("f-text").value), 300);
  });
  $("filter-form").addEventListener("submit", (ev) => { ev.preventDefault(); search($("f-text").value); });
  $("f-clear").addEventListener("click", () => clearFilters());
  $("show-left").addEventListener("change", showPeople);
  $("journal-box").addEventListener("toggle", () => { if ($("journal-box").open && S) loadJournal(); });

  $("send-text").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); $("send-form").requestSubmit(); }
  });
  $("send-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const text = $("send-text").value;
    const out = $("send-result");
    if (!text.trim()) { out.className = "error"; out.textContent = "Write a message first."; return; }
    const to = $("send-to").value.split(",").map((s) => s.trim()).filter(Boolean);
    const body = { text, urgent: $("send-urgent").checked };
    if (to.length) body.to = to;
    if ($("send-thread").value.trim()) body.thread = $("send-thread").value.trim();
    try {
      const r = await api("POST", base() + "/messages", body);
      out.className = "muted";
      const missed = r.not_reached.map((n) => n.address + " (" + reason(n.reason) + ")");
      out.textContent = "Sent" + (r.reached.length ? " to " + r.reached.join(", ") : "") +
        (missed.length ? "; not delivered: " + missed.join(", ") : "") + ".";
      $("send-text").value = "";
      scrollToEnd();
    } catch (err) {
      out.className = "error";
      out.textContent = "Not sent: " + failure(err);
    }
  });

  $("stop-space").addEventListener("click", () => {
    const live = S.state ? S.state.participants.filter((p) => p.status !== "left").length : 0;
    confirmAction({
      title: "Stop " + S.id + "?",
      text: "It takes no new message or participant; " + live + " participant" + (live === 1 ? "" : "s") +
        " will be recorded as left and their claims and reservations released. Its history stays.",
      ok: "Stop space",
      run: () => api("POST", base() + "/stop"),
      done: (sp) => { S.space = sp; showSpaceHead(); },
    });
  });
  $("archive-space").addEventListener("click", () => confirmAction({
    title: "Archive " + S.id + "?",
    text: "Archiving is final: the space is stopped for good, its history kept.",
    ok: "Archive space",
    run: () => api("POST", base() + "/archive"),
    done: (sp) => { S.space = sp; showSpaceHead(); },
  }));
  $("rotate-key").addEventListener("click", () => confirmAction({
    title: "Make a new join key for " + S.id + "?",
    text: "The old join key stops working at once; participants already in keep their tokens.",
    ok: "Make a new key",
    run: () => api("POST", base() + "/join-key"),
    done: (k) => showSecret(k.join_key),
  }));

  $("confirm-form").addEventListener("submit", confirmed);
  $("confirm-cancel").addEventListener("click", () => { pending = null; $("confirm").close(); });
  $("confirm").addEventListener("close", () => { pending = null; });
  $("secret").addEventListener("close", () => { $("secret-value").textContent = ""; });
  $("secret-copy").addEventListener("click", async () => {
    try { await navigator.clipboard.writeText($("secret-value").textContent); $("secret-copy").textContent = "Copied"; }
    catch (_) { $("secret-copy").textContent = "Select it and copy"; }
  });

  window.addEventListener("hashchange", () => {
    const id = hashSpace();
    if (id && key() && (!S || S.id !== id)) openSpace(id);
  });
  start();
});
