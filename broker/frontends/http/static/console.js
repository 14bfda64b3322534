// broker console: plain DOM, no framework, no build step.
// Every agent-supplied string goes into the page through textContent only:
// nothing an agent writes is ever parsed as HTML (and the CSP allows no
// inline script besides).
"use strict";

const KEY = "brokerOperatorKey";
const $ = (id) => document.getElementById(id);
let current = null; // {id, kind}
let follower = null; // AbortController of the live log stream

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function key() { return sessionStorage.getItem(KEY); }

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
    err.code = data && data.error; err.status = res.status; err.data = data;
    if (res.status === 401) showLogin("That key was refused: " + err.message);
    throw err;
  }
  return data;
}

function showLogin(message) {
  sessionStorage.removeItem(KEY);
  if (follower) follower.abort();
  $("app").hidden = true; $("forget").hidden = true; $("login").hidden = false;
  $("login-error").textContent = message || "";
}

async function start() {
  if (!key()) { showLogin(); return; }
  $("login").hidden = true; $("app").hidden = false; $("forget").hidden = false;
  await loadSpaces();
  const wanted = new URLSearchParams(location.hash.slice(1)).get("space");
  if (wanted) openSpace(wanted);
}

async function loadSpaces() {
  const list = $("spaces");
  const spaces = await api("GET", "/api/spaces");
  list.replaceChildren();
  for (const s of spaces.reverse()) {
    const li = el("li", s.id);
    li.dataset.id = s.id;
    li.appendChild(el("span", s.state, "state"));
    li.title = s.kind;
    li.addEventListener("click", () => { location.hash = "space=" + s.id; openSpace(s.id); });
    if (current && current.id === s.id) li.classList.add("active");
    list.appendChild(li);
  }
  $("status").textContent = spaces.length + " spaces";
}

async function openSpace(id) {
  const space = await api("GET", "/api/spaces/" + encodeURIComponent(id));
  current = { id: space.id, kind: space.kind };
  for (const li of $("spaces").children) li.classList.toggle("active", li.dataset.id === space.id);
  $("space").hidden = false;
  $("space-title").textContent = space.id + " · " + space.kind + " · " + space.state;
  $("log").replaceChildren();
  showTab("messages");
  follow(space.id, 0);
}

function showTab(name) {
  for (const b of document.querySelectorAll(".tabs button")) b.classList.toggle("active", b.dataset.tab === name);
  for (const t of document.querySelectorAll(".tab")) t.hidden = t.id !== "tab-" + name;
  if (!current) return;
  if (name === "participants") loadParticipants();
  if (name === "board") loadBoard();
  if (name === "quarantine") loadQuarantine();
}

// --- the log, live over SSE (fetch, so the key travels in a header) --------------
async function follow(id, after) {
  if (follower) follower.abort();
  const ctrl = new AbortController();
  follower = ctrl;
  let last = after;
  const state = $("follow-state");
  while (!ctrl.signal.aborted) {
    try {
      state.textContent = "following live";
      const res = await fetch("/api/spaces/" + encodeURIComponent(id) + "/messages/stream", {
        headers: { Authorization: "Bearer " + key(), "Last-Event-ID": String(last) },
        signal: ctrl.signal,
      });
      if (res.status === 401) { showLogin("The key was refused."); return; }
      if (!res.ok) throw new Error("stream: " + res.status);
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
          if (ev.event === "message" && ev.data) {
            const entry = JSON.parse(ev.data);
            if (entry.seq > last) { addEntry(entry); last = entry.seq; }
          } else if (ev.event === "end") {
            state.textContent = "the space is no longer running: log complete";
            return;
          }
        }
      }
    } catch (err) {
      if (ctrl.signal.aborted) return;
      state.textContent = "reconnecting after seq " + last + "…";
    }
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

function entryNode(e) {
  const li = el("li");
  li.dataset.seq = e.seq;
  const meta = el("div", null, "meta");
  meta.append(el("span", "#" + e.seq + " " + e.created_at_utc + " "));
  meta.append(el("span", e.kind, "kind"));
  if (e.urgent) meta.append(el("span", " URGENT", "urgent"));
  meta.append(el("span", " " + e.sender + (e.via ? " (via " + e.via + ")" : "") + " → " + (e.to || []).join(", ")));
  li.append(meta, el("div", e.body, "body"));
  const outcome = el("div", null, "outcome");
  if (e.reached && e.reached.length) outcome.append(el("span", "reached: " + e.reached.join(", "), "reached"));
  if (e.not_reached && e.not_reached.length) {
    outcome.append(el("span", (e.reached && e.reached.length ? " · " : "") + "not reached: " +
      e.not_reached.map((n) => n.address + " (" + n.reason + ")").join(", "), "missed"));
  }
  if (!outcome.childNodes.length) outcome.append(el("span", e.kind === "post" ? "channel post" : "recorded", "muted"));
  li.append(outcome);
  return li;
}

function addEntry(e) {
  const log = $("log");
  log.appendChild(entryNode(e));
  if (log.children.length > 5000) log.firstElementChild.remove();
}

// --- the other tabs --------------------------------------------------------------
function table(node, headers, rows) {
  node.replaceChildren();
  const head = el("tr");
  for (const h of headers) head.append(el("th", h));
  node.append(head);
  if (!rows.length) { const tr = el("tr"); const td = el("td", "(none)", "muted"); td.colSpan = headers.length; tr.append(td); node.append(tr); }
  for (const cells of rows) {
    const tr = el("tr");
    for (const c of cells) { const td = el("td"); if (c instanceof Node) td.append(c); else td.textContent = c == null ? "" : String(c); tr.append(td); }
    node.append(tr);
  }
}

const base = () => "/api/spaces/" + encodeURIComponent(current.id);

async function loadParticipants() {
  const people = await api("GET", base() + "/participants");
  table($("participants"), ["address", "agent", "role", "status", "waiting", "last seen", "joined"],
    people.map((p) => [p.address, p.agent, p.role, p.status, p.waiting, p.last_seen_utc, p.joined_at_utc]));
}

async function loadBoard() {
  const [claims, journal, board] = await Promise.all([
    api("GET", base() + "/claims"), api("GET", base() + "/claims/journal"), api("GET", base() + "/board")]);
  table($("claims"), ["key", "holder", "fence", "expires"], claims.map((c) => [c.key, c.holder, c.fence, c.expires_at]));
  table($("journal"), ["time", "event", "key", "owner", "fence"], journal.map((j) => [j.at_utc, j.event, j.key, j.owner, j.fence]));
  $("board").replaceChildren(...board.map(entryNode));
}

async function loadQuarantine() {
  const held = await api("GET", base() + "/quarantine");
  table($("quarantine"), ["message", "recipient", "sender", "body", "deliveries", "reason", "last error", ""],
    held.map((q) => {
      const b = el("button", "requeue");
      b.type = "button";
      b.addEventListener("click", async () => { await api("POST", base() + "/quarantine/requeue", { ids: [q.delivery_id] }); loadQuarantine(); });
      return [q.id, q.recipient, q.sender, q.body, q.deliveries, q.reason, q.last_error, b];
    }));
}

// --- wiring ------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, $("key").value.trim());
    $("key").value = "";
    try { await start(); } catch (err) { showLogin(err.message); }
  });
  $("forget").addEventListener("click", () => showLogin());
  for (const b of document.querySelectorAll(".tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));
  $("send-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const to = $("send-to").value.split(",").map((s) => s.trim()).filter(Boolean);
    const body = { text: $("send-text").value, urgent: $("send-urgent").checked };
    if (to.length) body.to = to;
    const out = $("send-result");
    try {
      const r = await api("POST", base() + "/messages", body);
      out.className = "muted";
      out.textContent = "sent #" + r.seq + (r.reached.length ? " → " + r.reached.join(", ") : "");
      $("send-text").value = "";
    } catch (err) {
      out.className = "error";
      out.textContent = (err.code || "error") + ": " + err.message;
    }
  });
  window.addEventListener("hashchange", () => {
    const id = new URLSearchParams(location.hash.slice(1)).get("space");
    if (id && key() && (!current || current.id !== id)) openSpace(id);
  });
  start().catch((err) => showLogin(err.message));
});
