// The skilldeck card console: sign in with an API key, see your threads, follow a run live,
// answer its card. It speaks the service's HTTP API only, with relative URLs (so the service
// may be mounted under a prefix), and renders every text with textContent: a model's words are
// never markup.

const $ = (id) => document.getElementById(id);
const TERMINAL = new Set(["card", "done", "error"]);
const STATUSES = ["new", "running", "resumable", "interrupted", "finished", "failed", "no_skill"];

// The API key lives in this variable only: never in storage, a cookie or the URL.
let apiKey = null;
// The thread on screen: {id, abort, lastEventId, reply, replies}; replaced when another is
// opened. `reply` is the model reply being written ({key, pre}); `replies` the last reply's box
// of each skill attempt, marked when its result is validated.
let shown = null;
// A thread made for a run the service refused: the next attempt reuses it.
let unusedThread = null;

// -- the HTTP API ------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message, detail) {
    super(message);
    this.status = status;
    this.code = code;
    this.detail = detail;
  }

  static async of(response) {
    let body = {};
    try {
      body = await response.json();
    } catch {
      // not JSON: the status line says it
    }
    const error = body.error || {};
    return new ApiError(
      response.status,
      error.code || `HTTP_${response.status}`,
      error.message || `${response.status} ${response.statusText}`,
      error,
    );
  }
}

async function api(path, { method = "GET", body, signal, headers = {} } = {}) {
  const sent = { Authorization: `Bearer ${apiKey}`, ...headers };
  if (body !== undefined) sent["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    signal,
    headers: sent,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  if (!response.ok) {
    const error = await ApiError.of(response);
    if (error.status === 401 && apiKey !== null) signOut("The service no longer accepts this key.");
    throw error;
  }
  return response;
}

const json = async (path, options) => (await api(path, options)).json();
const threadPath = (id, rest = "") => `threads/${encodeURIComponent(id)}${rest}`;

// Server-Sent Events from a fetch response (EventSource cannot send the key in a header).
async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replaceAll("\r\n", "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const message = { id: null, event: "message", data: "" };
      for (const line of buffer.slice(0, end).split("\n")) {
        const colon = line.indexOf(":");
        if (colon === 0) continue; // a comment: keep-alive
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "id") message.id = text;
        else if (field === "event") message.event = text;
        else if (field === "data") message.data += message.data ? `\n${text}` : text;
      }
      buffer = buffer.slice(end + 2);
      if (message.data) yield { ...message, data: JSON.parse(message.data) };
    }
  }
}

// -- small DOM helpers -------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function say(node, message) {
  node.textContent = message || "";
  node.hidden = !message;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// -- signing in and out ------------------------------------------------------------------------

async function signIn(event) {
  event.preventDefault();
  const key = $("api-key").value.trim();
  if (!key) return say($("login-error"), "Enter your API key.");
  apiKey = key;
  try {
    await json("threads?limit=1");
  } catch (error) {
    apiKey = null;
    return say($("login-error"), error.status === 401 ? "This key is not accepted." : error.message);
  }
  $("api-key").value = "";
  say($("login-error"), "");
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  await loadThreads();
  await route();
}

function signOut(message = "") {
  apiKey = null;
  closeThread();
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  say($("login-error"), message);
  $("api-key").focus();
}

// -- the threads list --------------------------------------------------------------------------

function statusBadge(status) {
  return el("span", { class: `status ${STATUSES.includes(status) ? status : ""}`, text: status });
}

async function loadThreads() {
  let rows;
  try {
    rows = (await json("threads?limit=200")).threads;
  } catch (error) {
    return say($("detail-error"), error.message);
  }
  $("threads-empty").hidden = rows.length > 0;
  $("threads").replaceChildren(
    ...rows.map((row) =>
      el(
        "li",
        { "data-thread": row.thread_id, class: shown && shown.id === row.thread_id ? "open" : "" },
        el(
          "a",
          { href: `#thread=${encodeURIComponent(row.thread_id)}`, title: row.thread_id },
          // A thread reads by what it is about; one that says nothing yet, by its id.
          row.title
            ? el("span", { class: "title", text: row.title })
            : el("span", { class: "title id", text: row.thread_id.slice(0, 12) }),
          statusBadge(row.status),
          el(
            "span",
            { class: "meta" },
            [row.last_skill || "no skill yet", row.matter_id].filter(Boolean).join(" · "),
            row.updated_at
              ? el("time", { datetime: row.updated_at, title: row.updated_at, text: when(row.updated_at) })
              : null,
          ),
        ),
      ),
    ),
  );
}

// "2026-11-27 23:20" of an ISO time (UTC, as the service stores it).
function when(iso) {
  return `${iso.slice(0, 10)} ${iso.slice(11, 16)}`;
}

// -- one thread --------------------------------------------------------------------------------

function closeThread() {
  if (shown) shown.abort.abort();
  shown = null;
  $("thread").hidden = true;
  $("run-form").hidden = true;
  say($("detail-error"), "");
}

function showThread(id) {
  closeThread();
  shown = { id, abort: new AbortController(), lastEventId: null, reply: null, replies: new Map() };
  $("placeholder").hidden = true;
  $("thread").hidden = false;
  $("thread-title").textContent = `Thread ${id.slice(0, 12)}`;
  $("thread-title").title = id;
  $("timeline").replaceChildren();
  $("card").hidden = true;
  $("resume-box").hidden = true;
  say($("thread-note"), "");
  for (const item of $("threads").children) {
    item.classList.toggle("open", item.dataset.thread === id);
  }
  return shown;
}

function setStatus(status) {
  const badge = $("thread-status");
  badge.className = `status ${status}`;
  badge.textContent = status;
}

async function openThread(id) {
  const view = showThread(id);
  let thread;
  try {
    thread = await json(threadPath(id), { signal: view.abort.signal });
  } catch (error) {
    if (error.name === "AbortError") return;
    $("thread").hidden = true;
    return say($("detail-error"), error.message); // another user's thread: the same 404
  }
  setStatus(thread.status);
  let response;
  try {
    response = await api(threadPath(id, "/stream"), { signal: view.abort.signal });
  } catch (error) {
    if (error.name === "AbortError") return;
    if (error.code !== "NO_RUN_STREAM") return say($("detail-error"), error.message);
    // No run of this thread streamed in this process: its checkpoints tell its story, and a
    // run that another process drives is watched until it moves on (see settle).
    await showHistory(view);
    await settle(view);
    return;
  }
  await follow(view, response);
}

async function showHistory(view) {
  const { checkpoints } = await json(threadPath(view.id, "/history"), { signal: view.abort.signal });
  say($("thread-note"), "Earlier runs, from the thread's checkpoints:");
  let last = null;
  for (const row of checkpoints) {
    const line = `${row.skill || "start"} → ${row.status}`;
    if (line === last) continue;
    last = line;
    addEntry("step", `step ${row.step ?? "-"}`, line);
  }
}

// Reads a run's events into the timeline until the run's last one; a stream that breaks off
// before it is picked up again where it stopped (Last-Event-ID).
async function follow(view, response) {
  let ended = false;
  for (let tries = 0; ; tries++) {
    try {
      for await (const message of events(response)) {
        if (view !== shown) return;
        if (message.id) view.lastEventId = message.id;
        render(view, message.data);
        ended = ended || TERMINAL.has(message.event);
      }
    } catch (error) {
      if (error.name === "AbortError" || view !== shown) return;
    }
    if (ended || tries >= 5) break;
    await sleep(400 * (tries + 1));
    try {
      const headers = view.lastEventId ? { "Last-Event-ID": view.lastEventId } : {};
      response = await api(threadPath(view.id, "/stream"), { signal: view.abort.signal, headers });
    } catch (error) {
      if (error.name === "AbortError") return;
    }
  }
  if (view === shown) await settle(view);
}

// After a stream: where the thread stands now is what the service says, not what the stream
// last said (another process may have moved it on since). A run still going on elsewhere is
// watched until it moves on: to its card, its end, or "resumable" when its process died.
// Returns that status.
async function settle(view) {
  let thread;
  try {
    thread = await json(threadPath(view.id), { signal: view.abort.signal });
  } catch (error) {
    return null;
  }
  if (view !== shown) return null;
  setStatus(thread.status);
  if (thread.status === "interrupted" && thread.card) renderCard(view, thread.card);
  else $("card").hidden = true;
  $("resume-box").hidden = thread.status !== "resumable";
  say($("continue-error"), "");
  await loadThreads();
  if (thread.status === "running" && !view.watching) watch(view, thread.status);
  return thread.status;
}

// Polls a thread whose run streams elsewhere; shows it afresh once its status changes.
async function watch(view, status) {
  view.watching = true;
  while (view === shown) {
    await sleep(2000);
    if (view !== shown) return;
    try {
      const now = (await json(threadPath(view.id), { signal: view.abort.signal })).status;
      if (now !== status) return openThread(view.id);
    } catch (error) {
      return;
    }
  }
}

// -- the timeline ------------------------------------------------------------------------------

function addEntry(kind, label, text, extra) {
  const item = el(
    "li",
    { class: `entry ${kind}` },
    el("span", { class: "label", text: label }),
    el("span", { class: "text", text }),
    extra,
  );
  $("timeline").append(item);
  item.scrollIntoView({ block: "nearest" });
  return item;
}

function details(summary, value) {
  return el(
    "details",
    {},
    el("summary", { text: summary }),
    el("pre", { text: JSON.stringify(value, null, 2) }),
  );
}

function render(view, event) {
  // A model reply is a run of deltas of one skill attempt; any other event ends it, so the
  // next model call (after a tool call, or in the run a card's answer resumes, where the
  // attempt numbers start again) writes a new entry instead of adding to an old one.
  if (event.event !== "delta") view.reply = null;
  switch (event.event) {
    case "step":
      if (event.status) setStatus(event.status);
      else setStatus("running");
      addEntry(
        "step",
        "step",
        [event.node, event.skill && event.skill !== event.node ? event.skill : null]
          .filter(Boolean)
          .join(" · ") + (event.status ? ` → ${event.status}` : ""),
      );
      break;
    case "delta": {
      const key = `${event.skill}/${event.attempt}`;
      if (!view.reply || view.reply.key !== key) {
        const pre = el("pre", { class: "live" });
        addEntry("delta", "writing", `${event.skill} (attempt ${event.attempt ?? 1})`, pre);
        view.reply = { key, pre };
        view.replies.set(key, pre);
      }
      view.reply.pre.textContent += event.text;
      break;
    }
    case "tool_call":
      addEntry(
        `tool ${event.status}`,
        "tool",
        `${event.name} ${event.status}${event.ms != null ? ` · ${Math.round(event.ms)} ms` : ""}`,
        event.args ? details("arguments", event.args) : null,
      );
      break;
    case "skill_result": {
      const pre = view.replies.get(`${event.skill}/${event.attempt}`);
      if (pre) pre.closest("li").classList.add("written");
      if (event.validation_errors && event.validation_errors.length) {
        addEntry(
          "retry",
          "retry",
          `${event.skill} attempt ${event.attempt} was rejected: ` +
            event.validation_errors.map((e) => `${e.path || e.field_key || ""} ${e.message}`).join("; "),
        );
      } else {
        addEntry(
          "result",
          event.skill,
          `${event.action}${event.response ? `: ${event.response}` : ""}`,
          Object.keys(event.data || {}).length ? details("data", event.data) : null,
        );
      }
      break;
    }
    case "card":
      setStatus("interrupted");
      addEntry("card-entry", "card", `${event.skill} asks (${event.review_type}): ` +
        event.questions.map((q) => q.question).join(" / "));
      renderCard(view, event);
      break;
    case "done":
      setStatus(event.status);
      addEntry("done", event.status, event.response || "The run ended.");
      $("card").hidden = true;
      break;
    case "error":
      setStatus("failed");
      addEntry("error", event.code, event.message);
      $("card").hidden = true;
      break;
    default:
      break;
  }
}

// -- the card ----------------------------------------------------------------------------------

// One control per input_type; each reads back an answer, or undefined when left empty (the
// service then says whether the question was required).
const CONTROLS = {
  text(question, id) {
    const input = el("textarea", { id, rows: 2, "aria-labelledby": `${id}-q` });
    return { node: input, read: () => (input.value.trim() ? input.value : undefined) };
  },
  select(question, id) {
    const select = el(
      "select",
      { id, "aria-labelledby": `${id}-q` },
      el("option", { value: "", text: "Choose…" }),
      ...(question.options || []).map((o, i) => el("option", { value: String(i), text: o.label })),
    );
    const read = () =>
      select.value === "" ? undefined : question.options[Number(select.value)].value;
    return { node: select, read };
  },
  multi_select(question, id) {
    return checkboxes(question.options || [], id);
  },
  boolean(question, id) {
    const choices = [
      ["Yes", true],
      ["No", false],
    ].map(([label, value], i) => {
      const input = el("input", { type: "radio", name: id, id: `${id}-${i}`, value: label });
      return { input, value, node: el("label", { for: `${id}-${i}` }, input, ` ${label}`) };
    });
    const read = () => choices.find((c) => c.input.checked)?.value;
    return { node: el("div", { class: "choices" }, ...choices.map((c) => c.node)), read };
  },
  number(question, id) {
    return numberInput(question, id, "any");
  },
  integer(question, id) {
    return numberInput(question, id, "1");
  },
  file_ids(question, id) {
    if (question.options && question.options.length) return checkboxes(question.options, id);
    const input = el("textarea", {
      id,
      rows: 3,
      placeholder: "one file id per line",
      "aria-labelledby": `${id}-q`,
    });
    const read = () => {
      const ids = input.value.split("\n").map((s) => s.trim()).filter(Boolean);
      return ids.length ? ids : undefined;
    };
    return { node: input, read };
  },
};

function numberInput(question, id, step) {
  const input = el("input", {
    id,
    type: "number",
    step,
    min: question.minimum,
    max: question.maximum,
    inputmode: step === "1" ? "numeric" : "decimal",
    "aria-labelledby": `${id}-q`,
  });
  // Text that is no number reads as null, which the service says must be a number.
  const read = () =>
    input.validity.badInput ? null : input.value.trim() ? Number(input.value) : undefined;
  return { node: input, read };
}

// A number question's bounds in words ("" when it has none).
function bounds(question) {
  const [low, high] = [question.minimum, question.maximum];
  if (low != null && high != null) return `from ${low} to ${high}`;
  if (low != null) return `at least ${low}`;
  return high != null ? `at most ${high}` : "";
}

function checkboxes(options, id) {
  const boxes = options.map((option, i) => {
    const input = el("input", { type: "checkbox", id: `${id}-${i}`, value: String(i) });
    return { input, option, node: el("label", { for: `${id}-${i}` }, input, ` ${option.label}`) };
  });
  const read = () => {
    const values = boxes.filter((b) => b.input.checked).map((b) => b.option.value);
    return values.length ? values : undefined;
  };
  return { node: el("div", { class: "choices" }, ...boxes.map((b) => b.node)), read };
}

function renderCard(view, card) {
  const form = $("card");
  const fields = card.questions.map((question, i) => {
    const id = `q${i}`;
    const make = CONTROLS[question.input_type] || CONTROLS.text;
    const control = make(question, id);
    const error = el("p", { class: "field-error", role: "alert", hidden: true });
    const edited = () => {
      node.classList.remove("invalid");
      say(error, "");
    };
    const node = el(
      "fieldset",
      { class: "field", "data-field-key": question.field_key, "data-input-type": question.input_type },
      el(
        "legend",
        { id: `${id}-q` },
        question.question,
        question.required
          ? el("span", { class: "required", title: "required", "aria-label": "required", text: " *" })
          : el("span", { class: "optional", text: " (optional)" }),
        bounds(question) ? el("span", { class: "hint", text: ` ${bounds(question)}` }) : null,
      ),
      control.node,
      error,
    );
    // An error is about the answer that was sent: editing the answer clears it.
    node.addEventListener("input", edited);
    node.addEventListener("change", edited);
    return { question, control, error, node };
  });
  const general = el("p", { class: "error", id: "card-error", role: "alert", hidden: true });
  const submit = el("button", { type: "submit", text: "Submit" });
  form.replaceChildren(
    el("h3", { text: `Card from ${card.skill}` }, el("span", { class: "hint", text: ` ${card.review_type}` })),
    general,
    ...fields.map((f) => f.node),
    el("div", { class: "actions" }, submit),
  );
  form.hidden = false;
  form.scrollIntoView({ block: "nearest" });
  showErrors(fields, general, card.errors || []);
  form.onsubmit = async (event) => {
    event.preventDefault();
    const answers = {};
    for (const field of fields) {
      const value = field.control.read();
      if (value !== undefined) answers[field.question.field_key] = value;
    }
    submit.disabled = true;
    let response;
    try {
      response = await api(threadPath(view.id, "/resume"), {
        method: "POST",
        body: { answers, interrupt_id: card.interrupt_id, stream_deltas: true },
        signal: view.abort.signal,
      });
    } catch (error) {
      submit.disabled = false;
      if (error.name === "AbortError") return;
      if (error.code === "INVALID_ANSWERS") return showErrors(fields, general, error.detail.errors || []);
      showErrors(fields, general, [{ message: error.message }]);
      if (error.status === 409) await settle(view); // answered elsewhere, or another card now
      return;
    }
    form.hidden = true;
    setStatus("running");
    addEntry("answer", "answered", Object.keys(answers).join(", "));
    await follow(view, response);
  };
  fields.find((f) => !f.error.hidden)?.control.node.focus?.();
}

// Goes on with a thread whose run stopped mid-way, from its last checkpoint.
async function continueRun() {
  const view = shown;
  if (!view) return;
  const button = $("continue");
  button.disabled = true;
  let response;
  try {
    response = await api(threadPath(view.id, "/continue"), {
      method: "POST",
      body: { stream_deltas: true },
      signal: view.abort.signal,
    });
  } catch (error) {
    button.disabled = false;
    if (error.name === "AbortError") return;
    say($("continue-error"), error.message);
    if (error.status === 409) await settle(view); // it moved on meanwhile
    return;
  }
  button.disabled = false;
  $("resume-box").hidden = true;
  setStatus("running");
  addEntry("answer", "continued", "from the last checkpoint");
  await follow(view, response);
}

function showErrors(fields, general, errors) {
  const unplaced = [];
  for (const field of fields) say(field.error, "");
  for (const field of fields) field.node.classList.remove("invalid");
  for (const error of errors) {
    const field = fields.find((f) => f.question.field_key === error.field_key);
    if (!field) {
      unplaced.push(error.field_key ? `${error.field_key}: ${error.message}` : error.message);
      continue;
    }
    field.node.classList.add("invalid");
    say(field.error, field.error.hidden ? error.message : `${field.error.textContent}; ${error.message}`);
  }
  say(general, unplaced.join("\n"));
}

// -- a new run ---------------------------------------------------------------------------------

let skills = [];

async function showRunForm() {
  closeThread();
  $("placeholder").hidden = true;
  $("run-form").hidden = false;
  say($("run-error"), "");
  try {
    skills = (await json("skills")).skills;
  } catch (error) {
    return say($("run-error"), error.message);
  }
  const contexts = [...new Set(skills.flatMap((s) => s.contexts))].sort();
  const select = $("run-context");
  const chosen = select.value;
  // No context is chosen for the user: a run in the wrong one starts the wrong skill.
  select.replaceChildren(
    el("option", { value: "", text: "Choose a context…" }),
    ...contexts.map((c) => el("option", { value: c, text: c })),
    el("option", { value: "auto", text: "auto (every skill; routed by the request)" }),
  );
  select.value = chosen;
  describeContext();
}

// The template last put in the input box: the box is the user's once they change it.
let template = null;

function describeContext() {
  const context = $("run-context").value;
  const running = context ? skills.filter((s) => context === "auto" || s.contexts.includes(context)) : [];
  const matter = running.some((s) => s.needs_matter);
  $("run-skills").textContent = running.length
    ? `Skills: ${running.map((s) => s.name).join(", ")}.${matter ? " A run needs a matter id." : ""}`
    : "";
  // A context of one skill starts that skill: its input schema says what the input holds.
  const schema = context !== "auto" && running.length === 1 ? running[0].input_schema : null;
  const fields = Object.entries(schema?.properties || {}).filter(([name]) => name !== "request");
  const required = new Set(schema?.required || []);
  $("run-input-fields").replaceChildren(
    ...fields.map(([name, field]) =>
      el(
        "li",
        { "data-field": name },
        el("code", { text: name }),
        el("span", { class: "hint", text: required.has(name) ? " (required)" : " (optional)" }),
        field.description ? `: ${field.description}` : "",
      ),
    ),
  );
  $("run-input-fields").hidden = fields.length === 0;
  const box = $("run-input");
  if (["", "{}", template].includes(box.value.trim())) {
    template = schema ? JSON.stringify(skeleton(schema), null, 2) : "{}";
    box.value = template;
  }
}

// An input with each required field of ``schema`` empty, for the user to fill in.
function skeleton(schema) {
  const kind = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  if (kind === "object" || schema.properties) {
    const value = {};
    for (const name of schema.required || []) value[name] = skeleton(schema.properties?.[name] || {});
    return value;
  }
  if (kind === "array") return schema.items && Object.keys(schema.items).length ? [skeleton(schema.items)] : [];
  return { string: "", number: 0, integer: 0, boolean: false }[kind] ?? null;
}

async function startRun(event) {
  event.preventDefault();
  const error = $("run-error");
  let input;
  try {
    input = JSON.parse($("run-input").value || "{}");
  } catch (problem) {
    return say(error, `Input is not JSON: ${problem.message}`);
  }
  if (input === null || typeof input !== "object" || Array.isArray(input)) {
    return say(error, "Input must be a JSON object, like {} or {\"documents\": [\"a.txt\"]}.");
  }
  const request = $("run-request").value.trim();
  if (request) input.request = request;
  const context = $("run-context").value;
  if (!context) return say(error, "Choose a context: it decides which skills may run.");
  const body = { input, context, stream_deltas: true };
  const matter = $("run-matter").value.trim();
  if (matter) body.matter_id = matter;
  try {
    unusedThread = unusedThread || (await json("threads", { method: "POST" })).thread_id;
  } catch (problem) {
    return say(error, problem.message);
  }
  const id = unusedThread;
  let response;
  try {
    response = await api(threadPath(id, "/runs"), { method: "POST", body });
  } catch (problem) {
    const wrong = problem.code === "INVALID_INPUT" ? problem.detail.errors || [] : [];
    if (!wrong.length) return say(error, problem.message);
    const lines = wrong.map((e) => `${e.path}: ${e.message}`);
    return say(error, [`The input does not fit skill ${problem.detail.skill}:`, ...lines].join("\n"));
  }
  unusedThread = null;
  const view = showThread(id);
  history.replaceState(null, "", `#thread=${encodeURIComponent(id)}`);
  setStatus("running");
  loadThreads();
  await follow(view, response);
}

// -- what the address says ---------------------------------------------------------------------

async function route() {
  if (apiKey === null) return;
  const match = location.hash.match(/^#thread=(.+)$/);
  if (match) return openThread(decodeURIComponent(match[1]));
  if (location.hash === "#new") return showRunForm();
  closeThread();
  $("placeholder").hidden = false;
}

$("login-form").addEventListener("submit", signIn);
$("logout").addEventListener("click", () => signOut());
$("refresh").addEventListener("click", loadThreads);
$("new-run").addEventListener("click", () => {
  if (location.hash === "#new") showRunForm();
  else location.hash = "new";
});
$("run-form").addEventListener("submit", startRun);
$("continue").addEventListener("click", continueRun);
$("run-context").addEventListener("change", describeContext);
window.addEventListener("hashchange", () => {
  if (shown && location.hash === `#thread=${encodeURIComponent(shown.id)}`) return;
  route();
});
$("api-key").focus();
