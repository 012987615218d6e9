// The heron web console: plain JavaScript, no build step. Everything it shows comes from the
// gateway's API and one event stream per session; text from the agent or the world is always
// set as text (never as HTML). HTML cards are drawn only in sandboxed frames served with their
// own content-security policy; approval controls are drawn only here.
"use strict";

const state = {
  csrf: null,
  session: null,
  source: null,
  lastId: null,
  seen: new Set(),
  shown: new Set(),
  received: [],
  job: null,
  jobTimer: null,
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node[key] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && state.csrf) headers["X-CSRF-Token"] = state.csrf;
  const response = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const type = response.headers.get("content-type") || "";
  const data = type.includes("json") ? await response.json() : await response.text();
  if (!response.ok) {
    const error = new Error((data && data.error) || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return data;
}

const enc = encodeURIComponent;
const sessionPath = (suffix = "") => `/v1/sessions/${enc(state.session)}${suffix}`;

// -- login -----------------------------------------------------------------------------------

async function start() {
  try {
    const me = await api("GET", "/v1/whoami");
    state.csrf = me.csrf || null;
    $("who").textContent = `${me.principal} (${me.role})`;
    $("login").hidden = true;
    $("app").hidden = false;
    await loadSessions();
  } catch (error) {
    $("app").hidden = true;
    $("login").hidden = false;
  }
}

$("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    const me = await api("POST", "/v1/login", { token: $("token").value });
    $("token").value = "";
    state.csrf = me.csrf;
    $("login-error").textContent = "";
    await start();
  } catch (error) {
    $("login-error").textContent = error.message;
  }
});

// -- sessions --------------------------------------------------------------------------------

async function loadSessions() {
  const { sessions } = await api("GET", "/v1/sessions");
  const list = $("sessions");
  list.replaceChildren();
  for (const s of sessions) {
    const item = el("li", { "data-session": s.name, onclick: () => openSession(s.name) },
      s.name, s.awake ? "" : " (parked)");
    list.append(item);
  }
  const wanted = new URLSearchParams(location.search).get("session");
  const first = sessions.find((s) => s.name === wanted) || sessions.find((s) => s.default);
  if (first && !state.session) await openSession(first.name);
}

async function openSession(name) {
  state.session = name;
  state.job = null;
  clearTimeout(state.jobTimer);
  $("job-output").hidden = true;
  for (const li of $("sessions").children) {
    li.classList.toggle("active", li.dataset.session === name);
  }
  $("session-title").textContent = name;
  clearRun();
  connect(null);
  await Promise.all([refreshApprovals(), refreshJobs(), refreshTimers()]);
}

function clearRun() {
  state.seen.clear();
  state.shown.clear();
  state.lastId = null;
  $("timeline").replaceChildren();
  $("log").replaceChildren();
  $("plan").hidden = true;
  $("streaming").hidden = true;
  $("streaming").textContent = "";
}

// -- the event stream ------------------------------------------------------------------------

function connect(after) {
  if (state.source) state.source.close();
  const query = after ? `?after=${enc(after)}` : "";
  const source = new EventSource(sessionPath(`/events${query}`));
  state.source = source;
  for (const kind of ["bus", "turn", "live", "resync"]) {
    source.addEventListener(kind, (event) => onFrame(kind, event));
  }
  source.onopen = () => { $("stream-state").textContent = "live"; };
  source.onerror = () => { $("stream-state").textContent = "reconnecting…"; };
}

/** Drop the stream and open a new one from the last frame seen (what a network cut does). */
function dropStream() {
  connect(state.lastId);
}

function onFrame(kind, event) {
  // A live frame has no id of its own: its `lastEventId` is the previous frame's.
  const id = kind === "live" ? "" : event.lastEventId;
  if (id) {
    state.received.push(id);
    if (state.seen.has(id)) return; // never the same frame twice
    state.seen.add(id);
    state.lastId = id;
  }
  const data = JSON.parse(event.data);
  if (kind === "resync") {
    clearRun();
    state.lastId = event.lastEventId;
    logLine(`resync: ${data.reason}`);
    refreshApprovals();
    return;
  }
  if (kind === "bus") return onBus(data);
  if (kind === "live") return onLive(data);
  return onTurn(data);
}

function logLine(text) {
  $("log").append(el("li", {}, text));
}

function onBus({ seq, event }) {
  logLine(`#${seq} ${event.kind} · ${event.source}/${event.channel} · ${event.content.text}`);
  if (event.kind === "user.input" || event.kind === "user.interrupt") {
    $("timeline").append(el("div", { class: "message user" }, event.content.text));
  }
  if (event.kind === "tool.result" && event.context.call_id) lateResult(event);
  if (["tool.result", "approval.answer"].includes(event.kind)) refreshApprovals();
  if (event.kind.startsWith("job.")) refreshJobs();
}

/** A call that waited (an approval, a background task) gets its real result as an event. */
function lateResult(event) {
  const card = findCard(event.context.call_id);
  if (!card) return;
  card.className = "card success";
  card.querySelector(".status").textContent = "result arrived";
  card.querySelector(".result").append(
    el("pre", { class: "late-result" }, event.content.text));
}

function onLive(data) {
  if (data.type === "text_delta") {
    const box = $("streaming");
    box.hidden = false;
    box.textContent += data.text;
  } else if (data.type === "progress") {
    const card = findCard(data.id);
    if (card) card.querySelector(".progress").textContent = data.message;
  } else {
    onTurn(data); // a card shown before it is stored: the stored frame follows, not shown again
  }
}

function findCard(id) {
  return document.querySelector(`.card[data-call="${CSS.escape(id)}"]`);
}

function onTurn(data) {
  const key = data.id || data.request_id ? `${data.type}:${data.id || data.request_id}` : null;
  if (key) {
    if (state.shown.has(key)) return;
    state.shown.add(key);
  }
  switch (data.type) {
    case "tool_call": return toolCall(data);
    case "tool_result": return toolResult(data);
    case "truncated": {
      const card = findCard(data.id);
      if (card) {
        card.querySelector(".markers").append(el("div", { class: "marker" },
          `truncated: ${data.retained_chars} of ${data.original_chars} characters kept`));
      }
      return;
    }
    case "plan": return plan(data);
    case "text":
    case "final":
      $("streaming").hidden = true;
      $("streaming").textContent = "";
      // A final answer without text repeats the `text` record before it.
      if (data.text) $("timeline").append(el("div", { class: "message assistant" }, data.text));
      return;
    case "approval_request":
    case "approval_decision":
      logLine(`${data.type}: ${data.tool} ${data.decision || data.summary || ""}`);
      return refreshApprovals();
    case "cancelled":
    case "error":
      $("timeline").append(el("div", { class: "message error" },
        `${data.type}: ${data.reason || data.message}`));
      return;
    default:
      logLine(`${data.type}`);
  }
}

function toolCall(data) {
  if (findCard(data.id)) return;
  const card = el("div", { class: "card pending", "data-call": data.id },
    el("header", {}, el("strong", {}, data.name), el("span", { class: "status" }, "pending")),
    el("pre", { class: "arguments" }, JSON.stringify(data.arguments, null, 2)),
    el("div", { class: "progress muted" }),
    el("div", { class: "result" }),
    el("div", { class: "markers" }));
  $("timeline").append(card);
  if (data.name === "send_card" && data.arguments.card) {
    $("timeline").append(sentCard(data.id, data.arguments.card));
  }
}

function toolResult(data) {
  const card = findCard(data.id);
  if (!card) return;
  card.className = `card ${data.status}`;
  const took = data.duration_ms ? ` · ${Math.round(data.duration_ms)} ms` : "";
  card.querySelector(".status").textContent = `${data.status}${took}`;
  const result = card.querySelector(".result");
  result.replaceChildren(el("pre", { class: "output" }, data.output));
  if (/\[… ?\d+ (lines|characters|chars) omitted/.test(data.output)) {
    card.querySelector(".markers").append(el("div", { class: "marker" }, "output truncated"));
  }
  if (data.receipt) result.append(el("div", { class: "receipt" }, `receipt ${data.receipt}`));
  // A call may have opened a request (its approval, or a question the agent asks).
  if (data.status === "awaiting_approval" || /^request_human/.test(data.name)) {
    refreshApprovals();
  }
  if (/job|timer/.test(data.name)) {
    refreshJobs();
    refreshTimers();
  }
  if (data.name === "send_card" && data.success && data.data && data.data.id) {
    const sent = document.querySelector(`.sent-card[data-call="${CSS.escape(data.id)}"]`);
    if (sent) activateCard(sent, data.data.id);
  }
}

function plan(data) {
  const list = $("plan-items");
  list.replaceChildren(...data.items.map((item) =>
    el("li", { class: item.status }, `${item.status === "completed" ? "☑" : "☐"} ${item.text}`)));
  $("plan").hidden = data.items.length === 0;
  $("plan").className = "plan";
}

// -- cards the agent sent --------------------------------------------------------------------

function sentCard(callId, card) {
  const box = el("div", { class: "sent-card", "data-call": callId },
    el("h3", {}, card.title), el("p", {}, card.summary));
  let htmlIndex = 0;
  for (const block of card.blocks || []) {
    if (block.type === "text") box.append(el("p", {}, block.text));
    else if (block.type === "fields") {
      box.append(el("dl", {}, ...block.fields.flatMap((f) => [el("dt", {}, f.label),
        el("dd", {}, f.value)])));
    } else if (block.type === "divider") box.append(el("hr"));
    else if (block.type === "file") box.append(el("p", { class: "muted" }, `File: ${block.path}`));
    else if (block.type === "html") {
      box.append(el("div", { class: "html-slot", "data-index": String(htmlIndex++) },
        block.fallback));
    }
  }
  const actions = el("div", { class: "actions" });
  for (const action of card.actions || []) {
    if (action.type === "button") {
      actions.append(el("button", { disabled: true, "data-action": action.id }, action.label));
    } else {
      actions.append(el("a", { href: action.url, rel: "noopener noreferrer", target: "_blank" },
        action.label));
    }
  }
  box.append(actions);
  return box;
}

function activateCard(box, messageId) {
  for (const slot of box.querySelectorAll(".html-slot")) {
    // Sandboxed with no permission at all: no script, no same-origin, no form, no top.
    const frame = el("iframe", { title: "card", referrerPolicy: "no-referrer" });
    frame.setAttribute("sandbox", "");
    frame.src = sessionPath(`/cards/${enc(messageId)}/html/${slot.dataset.index}`);
    slot.replaceWith(frame);
  }
  for (const button of box.querySelectorAll("button[data-action]")) {
    button.disabled = false;
    button.addEventListener("click", async () => {
      await api("POST", sessionPath(`/cards/${enc(messageId)}/actions`),
        { action: button.dataset.action });
      button.disabled = true;
    });
  }
}

// -- approvals -------------------------------------------------------------------------------

async function refreshApprovals() {
  if (!state.session) return;
  const { requests } = await api("GET", `/v1/requests?status=pending&session=${enc(state.session)}`);
  const box = $("approvals");
  box.replaceChildren(...requests.map((r) => (r.kind === "question" ? questionBox(r) : approvalBox(r))));
}

function questionBox(request) {
  const note = el("div", { class: "error" });
  const value = el("input", { class: "answer", placeholder: "your answer" });
  const send = async () => {
    try {
      await api("POST", `/v1/requests/${enc(request.id)}/answer`, { value: value.value });
      await refreshApprovals();
    } catch (error) {
      note.textContent = error.message;
    }
  };
  return el("div", { class: "approval question", "data-request": request.id },
    el("header", {}, el("strong", {}, "The agent asks"),
      el("span", { class: "status" }, request.id)),
    el("p", {}, request.question),
    request.options.length ? el("p", { class: "muted" }, `options: ${request.options.join(", ")}`) : null,
    el("div", {}, value, el("button", { "data-decision": "answer", onclick: send }, "Answer")),
    note);
}

function approvalBox(request) {
  const note = el("div", { class: "error" });
  const decide = (body) => async () => {
    try {
      await api("POST", `/v1/approvals/${enc(request.id)}`, body);
      await refreshApprovals();
    } catch (error) {
      note.textContent = error.message;
    }
  };
  const replacement = el("input", { placeholder: "what the model reads instead", class: "replacement" });
  const edited = el("textarea", { class: "edited", rows: 4 });
  edited.value = JSON.stringify(request.arguments, null, 2);
  return el("div", { class: "approval", "data-request": request.id },
    el("header", {}, el("strong", {}, `${request.tool} needs approval`),
      el("span", { class: "status" }, request.id)),
    el("p", {}, request.question),
    el("pre", { class: "arguments" }, JSON.stringify(request.arguments, null, 2)),
    el("div", {},
      el("button", { "data-decision": "yes", onclick: decide({ decision: "yes" }) }, "Approve"),
      el("button", { "data-decision": "no", class: "danger", onclick: decide({ decision: "no" }) },
        "Deny"),
      el("button", { "data-decision": "always",
        onclick: decide({ decision: "always", scope: "session" }) }, "Always (this session)")),
    el("div", {}, replacement,
      el("button", { "data-decision": "replace",
        onclick: () => decide({ decision: "replace", text: replacement.value })() },
      "Deny with reply")),
    el("details", {}, el("summary", {}, "Edit the arguments"), edited,
      el("button", { "data-decision": "edit",
        onclick: () => {
          let args;
          try { args = JSON.parse(edited.value); } catch (error) {
            note.textContent = `not JSON: ${error.message}`;
            return;
          }
          decide({ decision: "edit", arguments: args })();
        } }, "Run with these")),
    note);
}

// -- jobs and timers -------------------------------------------------------------------------

async function refreshJobs() {
  if (!state.session) return;
  const { jobs } = await api("GET", sessionPath("/jobs"));
  $("jobs").replaceChildren(...jobs.map((job) => el("li", {
    "data-job": job.job_id, onclick: () => showJob(job.job_id),
  }, `${job.job_id} ${job.state}: ${job.command}`)));
  if (state.job) await showJob(state.job);
}

async function showJob(id) {
  state.job = id;
  clearTimeout(state.jobTimer);
  const job = await api("GET", sessionPath(`/jobs/${enc(id)}?lines=200`));
  const out = $("job-output");
  out.hidden = false;
  out.textContent = job.output_tail.join("\n");
  // A running job's output is a file the job appends to, not an event: follow it.
  if (!job.ended_at && state.job === id) {
    state.jobTimer = setTimeout(() => showJob(id).catch(() => {}), 1000);
  }
}

async function refreshTimers() {
  if (!state.session) return;
  const { timers } = await api("GET", sessionPath("/timers"));
  $("timers").replaceChildren(...timers.map((t) =>
    el("li", {}, `${t.timer_id} ${t.state} ${t.next_fire || ""}: ${t.message}`)));
}

// -- sending ---------------------------------------------------------------------------------

$("message-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = $("message").value.trim();
  if (!text || !state.session) return;
  await api("POST", sessionPath("/messages"), { text, interrupt: $("urgent").checked });
  $("message").value = "";
});

$("interrupt").addEventListener("click", async () => {
  if (state.session) await api("POST", sessionPath("/interrupt"), { reason: "stop" });
});

window.heronConsole = { dropStream, state };
start();
