// The admin page: reads the worker's JSON API every few seconds and renders it. Everything shown is put
// in the page as text (textContent / Text nodes), never parsed as HTML: names may hold any character.
"use strict";

(() => {
  const REFRESH_MS = 3000;
  const TOKEN_KEY = "scheduler.token"; // sessionStorage: gone when the tab closes
  const RUNS_SHOWN = 50;

  const $ = (id) => document.getElementById(id);
  let tenant = new URLSearchParams(location.search).get("tenant") || "";
  const tenantsSeen = new Set();
  let generation = 0; // a newer refresh supersedes an older one still in flight
  let timer = null;

  // --- the API -------------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(path, status, reason) {
      super(`${path}: ${status || "no answer"} ${reason}`);
      Object.assign(this, { path, status, reason });
    }
  }

  async function api(path) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    let response;
    try {
      response = await fetch(path, { headers, cache: "no-store" });
    } catch (e) {
      throw new ApiError(path, 0, `the worker did not answer (${e.message})`);
    }
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      const reason = (body && (body.reason || body.error)) || response.statusText;
      throw new ApiError(path, response.status, reason);
    }
    return body;
  }

  // a write: { status, body } whatever the status (the dialog shows the server's answer as it is)
  async function send(method, path, body) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, {
        method,
        headers,
        cache: "no-store",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      return { status: 0, body: { error: `the worker did not answer (${e.message})` } };
    }
    return { status: response.status, body: await response.json().catch(() => null) };
  }

  const programPath = (id) => `/programs/${id.split("/").map(encodeURIComponent).join("/")}`;
  const schedulePath = (t, n) => `/schedules/${encodeURIComponent(t)}/${encodeURIComponent(n)}`;
  const ofTenant = (key) => !tenant || (key || "").startsWith(`${tenant}/`);

  async function loadSchedules() {
    const query = tenant ? `?tenant=${encodeURIComponent(tenant)}` : "";
    const body = await api(`/schedules${query}`);
    return { schedules: body.schedules, total: body.total };
  }

  async function loadJobs() {
    const body = await api("/jobs");
    return {
      jobs: body.jobs.filter((j) => ofTenant(j.schedule)),
      recent: body.recent.filter((o) => ofTenant(o.schedule)),
    };
  }

  let programsSeen = {}; // program id -> its definition (the graph's details)

  async function loadRuns() {
    programsSeen = await api("/programs");
    const programs = Object.keys(programsSeen);
    const answers = await Promise.all(programs.map((p) => api(`${programPath(p)}/runs`)));
    return answers
      .flatMap((a) => a.runs)
      .filter((r) => ofTenant(r.schedule) || ofTenant(r.program))
      .sort((a, b) => started(b) - started(a));
  }

  const loadFires = () => api("/stats/fires?minutes=60");

  async function loadSensors() {
    return (await api("/sensors")).sensors.filter((s) => ofTenant(s.sensor));
  }

  // delayed messages need a token for every tenant: with another one the section stays hidden
  async function loadMessages() {
    try {
      return await api("/stats/messages?limit=10");
    } catch (e) {
      if (e.status === 403) return null;
      throw e;
    }
  }

  // --- formatting ----------------------------------------------------------------------------------

  const pad = (n) => String(n).padStart(2, "0");

  function localTime(ms) {
    const d = new Date(ms);
    return (
      `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
    );
  }

  function span(ms) {
    if (Math.abs(ms) < 1000) return `${Math.round(Math.abs(ms))} ms`;
    const s = Math.round(Math.abs(ms) / 1000);
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
    const h = Math.floor(m / 60);
    if (h < 48) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
    return `${Math.floor(h / 24)} d ${h % 24} h`;
  }

  // relative times here are all ahead (next fire, next check): one that has passed is due
  function relative(at) {
    const diff = at - Date.now();
    return diff < 500 ? "due" : `in ${span(Math.max(diff, 1000))}`; // a refresh brings the next one
  }

  const started = (run) => run.started_at || run.created_at || 0;
  const constraintName = (c) => (c || "").replace(/Constraint$/, "");

  // --- rendering (text only) -----------------------------------------------------------------------

  // el("td", {class: "x", title: "y"}, "text", childNode): strings become Text nodes, never markup
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === undefined || value === null) continue;
      if (name === "class") node.className = value;
      else if (name === "data") Object.assign(node.dataset, value);
      else node.setAttribute(name, value);
    }
    node.append(...children.map((c) => (c instanceof Node ? c : String(c ?? ""))));
    return node;
  }

  const muted = (text) => el("span", { class: "muted" }, text);

  function timeCells(at, none) {
    if (!at) return [el("td", {}, muted(none)), el("td")];
    return [
      el("td", { class: "time", title: new Date(at).toISOString() }, localTime(at)),
      el("td", { class: "rel", data: { at: String(at) } }, relative(at)),
    ];
  }

  function fill(id, rows, empty) {
    const tbody = $(id).tBodies[0];
    const columns = $(id).tHead.rows[0].cells.length;
    const placeholder = el("tr", { class: "empty" }, el("td", { colspan: columns }, empty));
    tbody.replaceChildren(...(rows.length ? rows : [placeholder]));
  }

  function setCount(id, shown, total) {
    $(id).textContent = total !== undefined && total > shown ? `${shown} of ${total}` : String(shown);
  }

  function renderSchedules({ schedules, total }) {
    for (const s of schedules) tenantsSeen.add(s.tenant);
    $("tenants").replaceChildren(...[...tenantsSeen].sort().map((t) => el("option", { value: t })));
    const rows = schedules.map((s) => {
      const next = s.enabled ? s.nextFireAt : null;
      return el(
        "tr",
        { data: { key: s.key }, class: s.enabled && !s.finished ? "" : "disabled" },
        el("td", { class: "tenant" }, s.tenant),
        el("td", { class: "name", title: s.description || "" }, s.name,
          ...Object.entries(s.labels || {}).map(([k, v]) => el("span", { class: "chip" }, v ? `${k}=${v}` : k))),
        el("td", { class: "trigger" }, s.triggerText || s.trigger.type),
        el("td", { class: "program", title: s.overlap ? `overlap policy ${s.overlap}` : "" },
          (s.program || "") + (s.overlap && s.overlap !== "ALLOW_ALL" ? ` (overlap ${s.overlap})` : "")),
        el("td", { class: "enabled", title: s.paused ? pausedText(s.paused) : "" },
          (s.finished ? "finished" : s.enabled ? "yes" : s.paused ? pausedText(s.paused) : "no") +
          (s.firesLeft != null && !s.finished ? ` (${s.firesLeft} of ${s.maxFires} fires left)` : "")),
        ...timeCells(next, s.finished ? "finished" : s.enabled ? "on events" : "disabled"),
        el("td", { class: "actions" }, ...scheduleActions(s)),
      );
    });
    schedulesSeen = schedules;
    fill("schedules", rows, tenant ? `No schedules of tenant ${tenant}.` : "No schedules.");
    setCount("schedules-count", schedules.length, total);
  }

  function nextCheck(job) {
    if (!job.checkAt) return el("td", {}, muted(job.blockedBy ? "when a run changes" : ""));
    const at = job.checkAt;
    const rel = el("span", { class: "rel", data: { at: String(at) } }, relative(at));
    return el("td", { class: "time", title: new Date(at).toISOString() }, `${localTime(at)} `, rel);
  }

  function renderJobs({ jobs, recent }) {
    const rows = jobs.map((j) =>
      el(
        "tr",
        { data: { job: j.jobId } },
        el("td", { class: "schedule" }, j.schedule),
        el("td", { class: "program" }, j.program),
        el("td", { class: "state" }, j.attempt > 1 ? `${j.state} (attempt ${j.attempt})` : j.state),
        el("td", { class: "blocked" }, constraintName(j.blockedBy)),
        el("td", { class: "reason" }, j.reason || ""),
        nextCheck(j),
        el("td", { class: "time" }, j.triggeredAt ? localTime(j.triggeredAt) : ""),
      ),
    );
    fill("jobs", rows, "No pending jobs.");
    setCount("jobs-count", jobs.length);
    const outcomes = recent.slice().sort((a, b) => b.at - a.at);
    $("outcomes-box").hidden = outcomes.length === 0;
    fill(
      "outcomes",
      outcomes.map((o) =>
        el(
          "tr",
          {},
          el("td", {}, o.schedule),
          el("td", {}, o.program),
          el("td", {}, o.outcome),
          el("td", {}, o.reason || ""),
          el("td", { class: "time" }, localTime(o.at)),
        ),
      ),
      "None.",
    );
    setCount("outcomes-count", outcomes.length);
  }

  function renderRuns(all) {
    runsSeen = all;
    const runs = all.slice(0, RUNS_SHOWN);
    const rows = runs.map((r) => {
      const from = started(r);
      const duration = r.ended_at ? span(r.ended_at - from) : `${span(Date.now() - from)} so far`;
      return el(
        "tr",
        { title: r.error || null },
        el("td", { class: "program" }, r.program),
        el("td", { class: "run-id", title: r.attempt > 1 ? `attempt ${r.attempt} of job ${r.job_id}` : null }, r.run_id),
        el("td", { class: "schedule" }, r.schedule || ""),
        el("td", {}, el("span", { class: `badge s-${String(r.status).replace(/[^A-Z_]/g, "")}` }, r.status)),
        el("td", { class: "time" }, from ? localTime(from) : ""),
        el("td", { class: "time" }, r.ended_at ? localTime(r.ended_at) : ""),
        el("td", { class: "duration" }, from ? duration : ""),
        el("td", { class: "actions" }, ...runActions(r)),
      );
    });
    fill("runs", rows, "No runs yet.");
    setCount("runs-count", runs.length, all.length);
    drawTimeline();
  }

  // polling sensors: how each one's last evaluation went, its cursor, what it fired (docs: how-to/sensors)
  function renderSensors(sensors) {
    const rows = sensors.map((s) =>
      el(
        "tr",
        { data: { sensor: s.sensor } },
        el("td", { class: "program" }, s.sensor),
        el("td", {}, el("span", { class: `badge s-${s.outcome === "FIRED" ? "COMPLETED" : s.outcome}` }, s.outcome)),
        ...timeCells(s.evaluatedAt, "never"),
        el("td", { class: "cursor" }, s.cursor === null ? muted("none") : s.cursor),
        el("td", { class: "num" }, String(s.fires)),
        el("td", { class: "num" }, String(s.failures)),
        el("td", { class: "reason", title: s.reason || null }, (s.reason || "").split("\n").slice(-1)[0]),
      ),
    );
    fill("sensors", rows, "No sensors.");
    setCount("sensors-count", sensors.length);
    $("sensors-section").hidden = sensors.length === 0;
  }

  // delayed messages pending: by target topic, and the earliest due minutes (docs: how-to/delayed-messages)
  function renderMessages(stats) {
    const shown = stats !== null && (stats.pending > 0 || stats.counting.length > 0);
    $("messages-section").hidden = !shown;
    if (!shown) return;
    const topics = Object.entries(stats.byTopic).map(([topic, n]) =>
      el("tr", { data: { topic } }, el("td", {}, topic), el("td", { class: "num" }, String(n))),
    );
    fill("messages-topics", topics, "None.");
    const minutes = stats.byMinute.map((row) =>
      el("tr", { data: { at: String(row.at) } }, ...timeCells(row.at), el("td", { class: "num" }, String(row.count))),
    );
    if (stats.beyond > 0) {
      minutes.push(el("tr", {}, el("td", {}, muted("later")), el("td"), el("td", { class: "num" }, String(stats.beyond))));
    }
    fill("messages-minutes", minutes, "None.");
    const counting = stats.counting.length ? ` (still counting ${stats.counting.length} partitions)` : "";
    $("messages-count").textContent = `${stats.pending}${counting}`;
  }

  function showErrors(errors) {
    const messages = [...new Set(errors.map(describeError))];
    $("errors").replaceChildren(...messages.map((m) => el("li", {}, m)));
    $("errors").hidden = messages.length === 0;
  }

  function describeError(e) {
    if (!(e instanceof ApiError)) return `The page failed: ${e && e.message ? e.message : e}`;
    const what = `GET ${e.path.replace(/^\/programs\/.+\/runs$/, "/programs/…/runs")}`;
    if (e.status === 503) return `${what}: 503, ${e.reason}. Showing the last answer; retrying.`;
    if (e.status === 0) return `${what}: ${e.reason}. Retrying.`;
    return `${what}: ${e.status}, ${e.reason}`;
  }

  // --- auth ----------------------------------------------------------------------------------------

  function askForToken(e) {
    const hasToken = Boolean(sessionStorage.getItem(TOKEN_KEY));
    $("auth-message").textContent =
      e.status === 401
        ? hasToken
          ? `The worker refused this token (401: ${e.reason}). Enter another one.`
          : `This worker needs a bearer token with scope sched:r (401: ${e.reason}).`
        : `This token may not read these data (403: ${e.reason}). Enter another one.`;
    $("auth").hidden = false;
    $("auth").classList.add("problem");
    $("token").focus();
    $("updated").textContent = "Paused: waiting for a token";
  }

  function authOk() {
    const hasToken = Boolean(sessionStorage.getItem(TOKEN_KEY));
    $("auth").classList.remove("problem");
    $("auth").hidden = !hasToken;
    $("auth-message").textContent = hasToken ? "Using the token kept for this tab." : "";
  }

  // --- actions: every write goes through the dialog, which confirms, then shows the server's answer ---

  let schedulesSeen = [];
  let runsSeen = [];
  let dialogState = null; // { build(): [method, path, body], preview?(): Promise, done: bool }
  let previewTimer = null;

  const button = (label, cls, onClick) => {
    const b = el("button", { type: "button", class: `small ${cls}` }, label);
    b.addEventListener("click", onClick);
    return b;
  };

  function scheduleActions(s) {
    const key = { tenant: s.tenant, name: s.name };
    return [
      button("Edit", "edit", () => scheduleForm(s)),
      s.enabled
        ? button("Disable", "disable", () => pauseForm(key))
        : button("Enable", "enable", () => simpleAction("Enable", key, "enable")),
      button("Run now", "run", () => runNowForm(key)),
      button("Backfill", "backfill", () => backfillForm(key, Boolean(s.program))),
      ...(s.program ? [button("Backfills", "backfills", () => backfillsDialog(key))] : []),
      button("Delete", "delete", () => deleteAction(key)),
    ];
  }

  const LIVE = new Set(["PENDING", "PREPARING", "STARTING", "REQUESTING_RESOURCES", "INITIALIZING", "RUNNING",
    "SUSPENDING", "SUSPENDED", "RESUMING"]);

  function runActions(r) {
    // run ids are job ids ("tenant/name@dueAt", "tenant/name@run.N" for a manual one): the route takes their slashes
    const runId = encodeURIComponent(r.run_id).replace(/%2F/g, "/").replace(/%40/g, "@");
    const path = (what) => `${programPath(r.program)}/runs/${runId}/${what}`;
    const logs = r.logs_url ? [button("Logs", "logs", () => logsDialog(r, path("logs")))] : [];
    if (!LIVE.has(r.status)) return logs;
    const act = (what) => () =>
      openDialog({
        title: `${what[0].toUpperCase()}${what.slice(1)} run ${r.run_id} of ${r.program}?`,
        fields: [],
        build: () => ["POST", path(what)],
      });
    const out = [...logs, button("Stop", "stop", act("stop"))];
    if (r.status === "RUNNING") out.push(button("Suspend", "suspend", act("suspend")));
    if (r.status === "SUSPENDED") out.push(button("Resume", "resume", act("resume")));
    return out;
  }

  // a labelled input: el("label", ...) with data-field naming the body field its errors point at
  function field(label, name, input, hint) {
    input.name = name;
    input.dataset.field = name;
    return el("label", { class: "field" }, el("span", {}, label), input, hint ? muted(hint) : "");
  }
  const input = (props) => el("input", { autocomplete: "off", spellcheck: "false", ...props });
  const value = (name) => {
    const node = $("dialog-body").querySelector(`[name="${name}"]`);
    if (!node) return "";
    return node.type === "checkbox" ? node.checked : node.value.trim();
  };

  function openDialog(state) {
    dialogState = { ...state, done: false };
    $("dialog-title").textContent = state.title;
    $("dialog-body").replaceChildren(...state.fields);
    $("dialog-preview").replaceChildren(...(state.note ? [el("p", {}, state.note)] : []));
    $("dialog-answer").hidden = true;
    $("dialog-answer").textContent = "";
    $("dialog-confirm").hidden = false;
    $("dialog-confirm").disabled = false;
    $("dialog-confirm").textContent = state.confirm || "Confirm";
    $("dialog-close").textContent = "Cancel";
    if (!$("dialog").open) $("dialog").showModal();
    if (state.preview) previewDialog();
  }

  function markFields(fields) {
    for (const node of $("dialog-body").querySelectorAll("[data-field]")) node.classList.remove("invalid");
    for (const f of fields || []) {
      const name = String(f.field || "");
      const node = [...$("dialog-body").querySelectorAll("[data-field]")].find(
        (n) => name === n.dataset.field || name.startsWith(`${n.dataset.field}.`),
      );
      if (node) node.classList.add("invalid");
    }
  }

  function problems(body) {
    if (!body) return ["no answer"];
    const fields = (body.fields || []).map((f) => `${f.field}: ${f.message}`);
    return fields.length ? fields : [body.reason || body.error || JSON.stringify(body)];
  }

  // the request the dialog's fields make, or null (what is wrong with them said in the preview)
  function built(state) {
    try {
      return state.build();
    } catch (e) {
      $("dialog-preview").replaceChildren(el("p", { class: "bad" }, e.message));
      return null;
    }
  }

  async function previewDialog() {
    const state = dialogState;
    if (!state || !state.preview || state.done) return;
    const request = built(state);
    if (!request) return;
    const [method, path, body] = request;
    const answer = await send(method, `${path}${path.includes("?") ? "&" : "?"}dryRun=true`, body);
    if (state !== dialogState) return;
    markFields(answer.status === 200 ? [] : answer.body && answer.body.fields);
    $("dialog-preview").replaceChildren(
      ...(answer.status === 200
        ? state.preview(answer.body)
        : problems(answer.body).map((p) => el("p", { class: "bad" }, `${answer.status || "—"}: ${p}`))),
    );
  }

  async function confirmDialog() {
    const state = dialogState;
    if (!state || state.done) return;
    const request = built(state);
    if (!request) return;
    $("dialog-confirm").disabled = true;
    const [method, path, body] = request;
    const answer = await send(method, path, body);
    if (state !== dialogState) return;
    const ok = answer.status >= 200 && answer.status < 300;
    $("dialog-answer").hidden = false;
    $("dialog-answer").className = ok ? "ok" : "bad";
    $("dialog-answer").textContent = `${method} ${path}\n${answer.status || "no answer"} ${JSON.stringify(answer.body, null, 1)}`;
    markFields(ok ? [] : answer.body && answer.body.fields);
    if (ok) {
      state.done = true;
      $("dialog-confirm").hidden = true;
      $("dialog-close").textContent = "Close";
      setTimeout(refresh, 500); // the worker applies a write a moment after it answered 202
    } else $("dialog-confirm").disabled = false;
  }

  // the next fire times, in the schedule's zone and the browser's
  function fireList(times, zone) {
    if (!times || !times.length) return [el("p", { class: "muted" }, "No time trigger: it fires on events.")];
    const parts = { year: "numeric", month: "short", day: "numeric", weekday: "short", hour: "2-digit",
      minute: "2-digit", second: "2-digit", hourCycle: "h23", timeZoneName: "short" };
    let inZone;
    try {
      inZone = new Intl.DateTimeFormat("en-GB", { ...parts, timeZone: zone || "UTC" });
    } catch (e) { // a zone this browser does not know: the server accepted it, so show UTC and say so
      inZone = new Intl.DateTimeFormat("en-GB", { ...parts, timeZone: "UTC" });
      zone = `UTC: this browser does not know ${zone}`;
    }
    return [
      el("p", {}, `Next fire times (${zone || "UTC"}; your time after the dash):`),
      el("ol", { class: "fires" }, ...times.map((t) => el("li", {}, `${inZone.format(new Date(t))} — ${localTime(t)}`))),
    ];
  }

  function simpleAction(verb, key, what) {
    openDialog({
      title: `${verb} ${key.tenant}/${key.name}?`,
      fields: [],
      build: () => ["POST", `${schedulePath(key.tenant, key.name)}/${what}`],
      preview: (p) => [el("p", {}, `It will be ${p.enabled ? "enabled" : "disabled"}.`),
        ...(p.enabled ? fireList(p.next, zoneOf(key)) : [])],
    });
  }

  // disable = pause: why (a note everyone sees) and, optionally, when it resumes by itself
  function pauseForm(key) {
    openDialog({
      title: `Disable ${key.tenant}/${key.name}`,
      fields: [
        field("Note (why: shown in the list, by `schedules get` and in the history)", "note", el("textarea", { rows: 2 })),
        field("Until (optional, your time: it is enabled again then)", "until",
          input({ type: "datetime-local", step: "1" })),
      ],
      confirm: "Disable",
      build: () => {
        const body = {};
        if (value("note")) body.note = value("note");
        if (value("until")) body.until = new Date(value("until")).getTime();
        return ["POST", `${schedulePath(key.tenant, key.name)}/disable`, body];
      },
      preview: () => [el("p", {}, "It will be disabled: nothing fires, and pending jobs are dropped.")],
    });
  }

  const pausedText = (p) =>
    `paused${p.until ? ` until ${localTime(p.until)}` : ""}${p.note ? `: ${p.note}` : ""}` +
    ` (since ${localTime(p.at)}${p.by ? ` by ${p.by}` : ""})`;

  function deleteAction(key) {
    openDialog({
      title: `Delete ${key.tenant}/${key.name}?`,
      fields: [],
      confirm: "Delete",
      note: "No fire is due after the delete is applied; its history is kept.",
      build: () => ["DELETE", schedulePath(key.tenant, key.name)],
    });
  }

  const zoneOf = (key) => {
    const s = schedulesSeen.find((x) => x.tenant === key.tenant && x.name === key.name);
    return s && s.trigger && s.trigger.timezone;
  };

  function pairs(text) {
    const out = {};
    for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
      const at = line.indexOf("=");
      if (at < 1) throw new Error(`expected key=value, got "${line}"`);
      out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
    }
    return out;
  }

  function runNowForm(key) {
    openDialog({
      title: `Run ${key.tenant}/${key.name} now`,
      fields: [
        field("Arguments (key=value, one a line)", "arguments", el("textarea", { rows: 3 })),
        field("At (optional, your time)", "at", input({ type: "datetime-local", step: "1" })),
      ],
      build: () => {
        const body = { arguments: pairs(value("arguments")) };
        if (value("at")) body.at = new Date(value("at")).getTime();
        return ["POST", `${schedulePath(key.tenant, key.name)}/run`, body];
      },
      preview: (p) => [el("p", {}, `It will fire once, at ${localTime(p.first)}, with its data and these arguments.`)],
    });
  }

  // a plain schedule's backfill fires every instant at once; a program's is a backfill object: chosen by
  // what ran (reprocess), a few at a time, followed and cancelled in its Backfills dialog
  function backfillForm(key, launchesProgram) {
    const hourAgo = new Date(Date.now() - 3600_000);
    const local = (d) => `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
    const select = (name, options) => el("select", { name }, ...options.map((o) => el("option", { value: o }, o)));
    const objectFields = launchesProgram ? [
      field("Reprocess (none: only instants that never ran; failed: and those that failed; all)", "reprocess",
        select("reprocess", ["none", "failed", "all"])),
      field("At most this many at a time", "maxConcurrent", input({ type: "number", min: "1", max: "100", value: "1" })),
      field("Order", "order", select("order", ["oldest", "newest"])),
    ] : [];
    openDialog({
      title: `Backfill ${key.tenant}/${key.name}`,
      fields: [
        field("From (your time)", "from", input({ type: "datetime-local", value: local(hourAgo) })),
        field("To (your time, included)", "to", input({ type: "datetime-local", value: local(new Date()) })),
        ...objectFields,
      ],
      confirm: "Backfill",
      build: () => {
        if (!value("from") || !value("to")) throw new Error("from and to are both needed");
        const body = { from: new Date(value("from")).getTime(), to: new Date(value("to")).getTime() };
        if (!launchesProgram) return ["POST", `${schedulePath(key.tenant, key.name)}/backfill`, body];
        Object.assign(body, { reprocess: value("reprocess"), maxConcurrent: Number(value("maxConcurrent")),
          order: value("order") });
        return ["POST", `${schedulePath(key.tenant, key.name)}/backfills`, body];
      },
      preview: (p) => launchesProgram ? [
        el("p", { class: "fires-count" }, `It will launch ${p.instants} instant${p.instants === 1 ? "" : "s"}` +
          (p.instants ? `, from ${localTime(p.first)} to ${localTime(p.last)}` : "") +
          ` (${p.leftOut} left out: they ran).`),
      ] : [
        el("p", { class: "fires-count" }, `It will make ${p.fires} fire${p.fires === 1 ? "" : "s"}` +
          (p.fires ? `, from ${localTime(p.first)} to ${localTime(p.last)}.` : ".")),
      ],
    });
  }

  // a run's output as its launcher keeps it, followed (long polls) while the run goes on and the dialog is open
  function logsDialog(r, path) {
    const out = el("pre", { class: "run-logs" }, "");
    const state = el("p", { class: "muted run-logs-state" }, "Loading…");
    openDialog({ title: `Output of ${r.run_id} (${r.program})`, fields: [out, state], build: () => null });
    $("dialog-confirm").hidden = true;
    $("dialog-close").textContent = "Close";
    const mine = dialogState;
    const follow = async (offset) => {
      for (let first = true; dialogState === mine && $("dialog").open; first = false) {
        const answer = await send("GET", `${path}?offset=${offset}&follow=${!first}`);
        if (dialogState !== mine) return;
        if (answer.status !== 200) {
          state.replaceChildren(...problems(answer.body).map((p) => el("span", { class: "bad" }, `${answer.status}: ${p} `)));
          return;
        }
        const page = answer.body;
        if (page.dropped) out.append(`[${page.dropped.toLocaleString()} bytes not kept]\n`);
        out.append(page.text);
        out.scrollTop = out.scrollHeight;
        offset = page.next;
        const done = page.complete && offset >= page.size;
        state.textContent = page.reason || `${page.size.toLocaleString()} bytes printed; ${page.status}${done ? "" : ", following…"}`;
        if (done) return;
      }
    };
    follow(0);
  }

  // a program schedule's backfills and their progress, newest first; a running one can be cancelled
  function backfillsDialog(key) {
    const box = el("div", { class: "backfills" }, muted("Loading…"));
    const path = `${schedulePath(key.tenant, key.name)}/backfills`;
    openDialog({ title: `Backfills of ${key.tenant}/${key.name}`, fields: [box], build: () => null });
    $("dialog-confirm").hidden = true;
    $("dialog-close").textContent = "Close";
    const load = async () => {
      const answer = await send("GET", path);
      if (answer.status !== 200) {
        box.replaceChildren(...problems(answer.body).map((p) => el("p", { class: "bad" }, `${answer.status}: ${p}`)));
        return;
      }
      const rows = answer.body.backfills.map((b) => el("p", { class: "backfill", data: { id: b.id, status: b.status } },
        `${b.id} ${b.status}: ${b.launched} of ${b.total} launched, ${b.completed} completed, ${b.failed} failed, ` +
        `${b.skipped + b.cancelled} skipped or cancelled, ${b.inFlight} in flight (${localTime(b.from)} – ${localTime(b.to)}) `,
        ...(b.status === "RUNNING" ? [button("Cancel", "cancel-backfill", async () => {
          await send("DELETE", `${path}/${encodeURIComponent(b.id)}`);
          setTimeout(load, 500);
        })] : [])));
      box.replaceChildren(...(rows.length ? rows : [muted("No backfills.")]));
    };
    load();
  }

  const OUTPUT_ONLY = ["key", "createdAt", "updatedAt", "activeSince", "version", "nextFireAt", "triggerText",
    "finished", "fires", "firesLeft", "tenant", "name", "paused"];

  // the schedule form: the common fields, the trigger by kind, anything else as JSON; validated as you
  // type by the server itself (a dry run of the write) with the next fire times in the schedule's zone
  function scheduleForm(existing) {
    const t = existing ? existing.trigger : { type: "cron", expression: "0 0 2 * * *", timezone: "UTC" };
    const extra = {};
    for (const [k, v] of Object.entries(existing || {})) {
      if (!OUTPUT_ONLY.includes(k) && !["trigger", "topic", "program", "data", "enabled"].includes(k)) extra[k] = v;
    }
    const kind = el("select", {}, ...["cron", "frequency", "partition", "programStatus", "json"].map((k) =>
      el("option", { value: k }, k)));
    kind.value = ["cron", "frequency", "partition", "programStatus"].includes(t.type) ? t.type : "json";
    const unit = el("select", {}, ...["SECONDS", "MINUTES", "HOURS", "DAYS"].map((u) => el("option", { value: u }, u)));
    unit.value = t.timeUnit || "MINUTES";
    const dataText = Object.entries((existing && existing.data) || {}).map(([k, v]) => `${k}=${v}`).join("\n");
    const fields = [
      field("Tenant", "tenant", input({ value: existing ? existing.tenant : tenant, disabled: existing ? "" : null })),
      field("Name", "name", input({ value: existing ? existing.name : "", disabled: existing ? "" : null })),
      field("Trigger", "trigger.type", kind),
      field("Cron expression", "trigger.expression", input({ value: t.expression || "" }), "5 fields, or 6 with seconds first"),
      field("Time zone", "trigger.timezone", input({ value: t.timezone || "UTC" })),
      field("Every", "trigger.time", input({ type: "number", min: "1", value: String(t.time || 5) })),
      field("Unit", "trigger.timeUnit", unit),
      field("Dataset", "trigger.dataset", input({ value: t.dataset || "" }), "namespace.dataset"),
      field("New partitions", "trigger.minPartitions", input({ type: "number", min: "1", value: String(t.minPartitions || 1) })),
      field("Program watched", "trigger.program", input({ value: t.program || "" }), "namespace/application/type/name"),
      field("On", "trigger.on", input({ value: (t.on || ["SUCCEEDED"]).join(",") }), "SUCCEEDED, FAILED, KILLED, STOPPED, FINISHED"),
      field("Trigger (JSON)", "trigger.json", el("textarea", { rows: 3 }, JSON.stringify(t))),
      field("Topic", "topic", input({ value: existing ? existing.topic || "" : "" }), "where fires go (a program's launch topic by default)"),
      field("Program to launch", "program", input({ value: existing ? existing.program || "" : "" })),
      field("Data (key=value, one a line)", "data", el("textarea", { rows: 2 }, dataText)),
      field("Other fields (JSON)", "extra", el("textarea", { rows: 2 }, JSON.stringify(extra))),
      field("Enabled", "enabled", input({ type: "checkbox" })),
    ];
    fields[fields.length - 1].querySelector("input").checked = existing ? Boolean(existing.enabled) : true;
    const show = () => {
      const k = kind.value;
      const visible = {
        "trigger.expression": k === "cron", "trigger.timezone": k === "cron", "trigger.time": k === "frequency",
        "trigger.timeUnit": k === "frequency", "trigger.dataset": k === "partition",
        "trigger.minPartitions": k === "partition", "trigger.program": k === "programStatus",
        "trigger.on": k === "programStatus", "trigger.json": k === "json",
      };
      for (const f of fields) {
        const name = f.querySelector("[data-field]").dataset.field;
        if (name in visible) f.hidden = !visible[name];
      }
    };
    kind.addEventListener("change", show);
    show();
    const trigger = () => {
      switch (value("trigger.type")) {
        case "cron": return { type: "cron", expression: value("trigger.expression"), timezone: value("trigger.timezone") || "UTC" };
        case "frequency": return { type: "frequency", timeUnit: value("trigger.timeUnit"), time: Number(value("trigger.time")) };
        case "partition": return { type: "partition", dataset: value("trigger.dataset"), minPartitions: Number(value("trigger.minPartitions")) };
        case "programStatus":
          return { type: "programStatus", program: value("trigger.program"),
            on: value("trigger.on").split(",").map((x) => x.trim()).filter(Boolean) };
        default: return parseJson(value("trigger.json"), "trigger");
      }
    };
    openDialog({
      title: existing ? `Edit ${existing.tenant}/${existing.name}` : "New schedule",
      fields,
      confirm: existing ? "Save changes" : "Create",
      build: () => {
        const body = { ...parseJson(value("extra") || "{}", "other fields"), trigger: trigger(),
          topic: value("topic"), data: pairs(value("data")), enabled: value("enabled") };
        if (value("program")) body.program = value("program");
        if (existing) return ["PUT", schedulePath(existing.tenant, existing.name), body];
        return ["POST", "/schedules", { tenant: value("tenant"), name: value("name"), ...body }];
      },
      preview: (p) => [el("p", { class: "trigger-text" }, `${p.key}: ${p.triggerText}`),
        ...fireList(p.next, value("trigger.type") === "cron" ? value("trigger.timezone") : "UTC")],
    });
  }

  function parseJson(text, what) {
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new Error(`${what}: not valid JSON (${e.message})`);
    }
  }

  function programForm() {
    const kind = el("select", {}, ...["external", "pyspark", "command"].map((k) => el("option", { value: k }, k)));
    openDialog({
      title: "Register a program",
      fields: [
        field("Program id", "program", input({ placeholder: "namespace/application/type/name" })),
        field("Kind", "kind", kind),
        field("Target (pyspark)", "target", input({ placeholder: "package.module:function" })),
        field("Command (JSON array)", "argv", input({ placeholder: '["python", "job.py"]' })),
        field("Other fields (JSON)", "extra", el("textarea", { rows: 2 }, "{}")),
      ],
      confirm: "Register",
      build: () => {
        const id = value("program");
        if (id.split("/").length !== 4) throw new Error("a program id is namespace/application/type/name");
        const body = { ...parseJson(value("extra") || "{}", "other fields"), kind: value("kind") };
        if (value("target")) body.target = value("target");
        if (value("argv")) body.argv = parseJson(value("argv"), "command");
        return ["PUT", programPath(id), body];
      },
    });
  }

  // --- drawings: SVG built node by node (no markup parsed), styled by the stylesheet's classes -------

  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
    node.append(...children.map((c) => (c instanceof Node ? c : String(c ?? ""))));
    return node;
  }
  const tooltip = (text) => svg("title", {}, text);

  function drawTimeline() {
    const period = Number($("timeline-period").value);
    const now = Date.now();
    const from = now - period;
    const runs = runsSeen.filter((r) => (r.ended_at || now) >= from && started(r) && started(r) <= now);
    const programs = [...new Set(runs.map((r) => r.program))].sort();
    const W = 1100, LABEL = 260, ROW = 24, TOP = 24;
    const x = (t) => LABEL + ((Math.max(t, from) - from) / period) * (W - LABEL - 10);
    const H = TOP + Math.max(programs.length, 1) * ROW + 10;
    const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "timeline", role: "img",
      "aria-label": `runs per program over the last ${span(period)}` });
    for (let i = 0; i <= 6; i++) {
      const t = from + (period * i) / 6;
      chart.append(svg("line", { x1: x(t), x2: x(t), y1: TOP - 6, y2: H, class: "grid" }),
        svg("text", { x: x(t), y: 12, class: "tick", "text-anchor": i === 0 ? "start" : i === 6 ? "end" : "middle" },
          period > 86400_000 ? localTime(t).slice(5, 16) : localTime(t).slice(11, 16)));
    }
    programs.forEach((program, row) => {
      const y = TOP + row * ROW;
      chart.append(svg("text", { x: 4, y: y + 15, class: "label" }, program));
      for (const r of runs.filter((x) => x.program === program)) {
        const x0 = x(started(r));
        const x1 = Math.max(x(r.ended_at || now), x0 + 3);
        const status = String(r.status).replace(/[^A-Z_]/g, "");
        const retry = r.attempt > 1;
        const bar = svg("rect", { x: x0, y: y + 4, width: x1 - x0, height: ROW - 8, rx: 2,
          class: `bar s-${status}${retry ? " retry" : ""}`, "data-run": r.run_id },
          tooltip(`${r.run_id}${retry ? ` (attempt ${r.attempt})` : ""}: ${r.status}, ${localTime(started(r))}` +
            (r.ended_at ? ` – ${localTime(r.ended_at)} (${span(r.ended_at - started(r))})` : ", still going") +
            (r.error ? ` — ${r.error}` : "")));
        chart.append(bar);
        if (retry) chart.append(svg("text", { x: x1 + 2, y: y + 15, class: "retry-mark" }, `#${r.attempt}`));
      }
    });
    if (!programs.length) chart.append(svg("text", { x: LABEL, y: TOP + 15, class: "label muted" }, "No runs in this period."));
    chart.append(svg("line", { x1: x(now), x2: x(now), y1: TOP - 6, y2: H, class: "now" }));
    $("timeline").replaceChildren(chart);
    const statuses = [...new Set(runs.map((r) => r.status))].sort();
    $("timeline-legend").replaceChildren(
      `${runs.length} run${runs.length === 1 ? "" : "s"} of ${programs.length} program${programs.length === 1 ? "" : "s"}. `,
      ...statuses.map((s) => el("span", { class: `badge s-${s.replace(/[^A-Z_]/g, "")}` }, s)),
      runs.some((r) => r.attempt > 1) ? el("span", { class: "muted" }, " dashed: a retry (#attempt)") : "",
    );
  }

  function drawFires(stats) {
    const W = 1100, H = 220, LEFT = 50, RIGHT = 60, TOP = 10, BOTTOM = 24;
    const now = Math.floor(Date.now() / 60_000) * 60_000;
    const byMinute = new Map(stats.minutes.map((m) => [m.at, m]));
    const minutes = [];
    for (let at = now - 60 * 60_000; at <= now; at += 60_000) minutes.push(byMinute.get(at) || { at, fires: 0 });
    const maxFires = Math.max(1, ...minutes.map((m) => m.fires));
    const maxLate = Math.max(1, ...minutes.map((m) => m.p99Ms || 0));
    const bw = (W - LEFT - RIGHT) / minutes.length;
    const yF = (n) => TOP + (H - TOP - BOTTOM) * (1 - n / maxFires);
    const yL = (ms) => TOP + (H - TOP - BOTTOM) * (1 - Math.log10(1 + ms) / Math.log10(1 + maxLate));
    const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "fires-chart", role: "img",
      "aria-label": "fires per minute and lateness p99 over the last hour" });
    chart.append(svg("text", { x: 4, y: TOP + 8, class: "tick" }, `${maxFires}`),
      svg("text", { x: 4, y: H - BOTTOM, class: "tick" }, "0"),
      svg("text", { x: W - RIGHT + 4, y: TOP + 8, class: "tick late" }, `${maxLate} ms`),
      svg("text", { x: W - RIGHT + 4, y: H - BOTTOM, class: "tick late" }, "0 ms"));
    minutes.forEach((m, i) => {
      if (!m.fires) return;
      chart.append(svg("rect", { x: LEFT + i * bw + 1, y: yF(m.fires), width: Math.max(bw - 2, 1),
        height: H - BOTTOM - yF(m.fires), class: "fire-bar", "data-at": m.at, "data-fires": m.fires },
        tooltip(`${localTime(m.at).slice(11, 16)}: ${m.fires} fires, lateness p50 ≤ ${m.p50Ms} ms, p99 ≤ ${m.p99Ms} ms`)));
    });
    const points = minutes.map((m, i) => (m.fires ? `${LEFT + i * bw + bw / 2},${yL(m.p99Ms || 0)}` : null)).filter(Boolean);
    if (points.length) chart.append(svg("polyline", { points: points.join(" "), class: "late-line" }));
    minutes.forEach((m, i) => {
      if (m.fires) chart.append(svg("circle", { cx: LEFT + i * bw + bw / 2, cy: yL(m.p99Ms || 0), r: 3, class: "late-dot" }));
    });
    for (let i = 0; i <= 60; i += 10) {
      chart.append(svg("text", { x: LEFT + i * bw, y: H - 6, class: "tick" }, localTime(minutes[i].at).slice(11, 16)));
    }
    $("fires").replaceChildren(chart);
    const total = minutes.reduce((n, m) => n + m.fires, 0);
    const last = [...minutes].reverse().find((m) => m.fires);
    $("fires-summary").textContent = total
      ? `${total} fire${total === 1 ? "" : "s"} in the last hour; latest minute with fires ${localTime(last.at).slice(11, 16)}: ` +
        `${last.fires} fire${last.fires === 1 ? "" : "s"}, lateness p99 ≤ ${last.p99Ms} ms. Bars: fires per minute; line: lateness p99 (log scale, right).`
      : "No scheduled fires in the last hour.";
  }

  function drawFiresError(e) {
    $("fires").replaceChildren();
    $("fires-summary").textContent =
      e && e.status === 403
        ? "Fire statistics need a token for every tenant ('*')."
        : `Fire statistics unavailable: ${e && e.message ? e.message : e}`;
  }

  // the pipeline: datasets and watched programs -> schedules -> launched programs, in layers
  function leaves(trigger) {
    if (!trigger) return [];
    if (trigger.triggers) return trigger.triggers.flatMap(leaves);
    return [trigger];
  }

  function pipeline(schedules) {
    const nodes = new Map();
    const edges = [];
    const node = (id, kind, label, data) => {
      if (!nodes.has(id)) nodes.set(id, { id, kind, label, data, schedules: [] });
      return nodes.get(id);
    };
    for (const s of schedules) {
      const sid = `schedule:${s.tenant}/${s.name}`;
      const watched = [];
      for (const t of leaves(s.trigger)) {
        if (t.dataset && ["partition", "dataSize", "elapsed"].includes(t.type)) watched.push(node(`dataset:${t.dataset}`, "dataset", t.dataset));
        if (t.program && t.type !== "elapsed") watched.push(node(`program:${t.program}`, "program", t.program));
      }
      if (!watched.length && !s.program) continue; // a time-only schedule with no program: not a pipeline
      node(sid, "schedule", `${s.tenant}/${s.name}`, s);
      for (const w of watched) {
        edges.push([w.id, sid]);
        w.schedules.push(sid);
      }
      if (s.program) edges.push([sid, node(`program:${s.program}`, "program", s.program).id]);
    }
    // layers: the longest path from a source (bounded: a cycle does not loop)
    const layer = new Map([...nodes.keys()].map((id) => [id, 0]));
    for (let pass = 0; pass < nodes.size; pass++) {
      let moved = false;
      for (const [a, b] of edges) {
        if (layer.get(b) < layer.get(a) + 1 && layer.get(a) + 1 < nodes.size + 1) {
          layer.set(b, layer.get(a) + 1);
          moved = true;
        }
      }
      if (!moved) break;
    }
    return { nodes, edges, layer };
  }

  function drawGraph() {
    const { nodes, edges, layer } = pipeline(schedulesSeen);
    if (!nodes.size) {
      $("graph").replaceChildren(el("p", { class: "muted" }, "No data- or program-driven schedules" + (tenant ? ` of ${tenant}.` : ".")));
      return;
    }
    const columns = [];
    for (const n of [...nodes.values()].sort((a, b) => a.label.localeCompare(b.label))) {
      const c = layer.get(n.id);
      (columns[c] = columns[c] || []).push(n);
    }
    const BOX_W = 210, BOX_H = 28, COL = 265, ROW = 44;
    const pos = new Map();
    columns.forEach((col, c) => (col || []).forEach((n, r) => pos.set(n.id, { x: 10 + c * COL, y: 10 + r * ROW })));
    const W = 20 + columns.length * COL;
    const H = 20 + Math.max(...columns.map((col) => (col || []).length)) * ROW;
    const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "graph", role: "img",
      "aria-label": "datasets and programs, the schedules they trigger, the programs those launch" });
    for (const [a, b] of edges) {
      const p = pos.get(a), q = pos.get(b);
      const x1 = p.x + BOX_W, y1 = p.y + BOX_H / 2, x2 = q.x, y2 = q.y + BOX_H / 2;
      const mid = (x1 + x2) / 2;
      chart.append(svg("path", { d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, class: "edge",
        "data-from": a, "data-to": b }));
      chart.append(svg("circle", { cx: x2, cy: y2, r: 3, class: "edge-end" }));
    }
    for (const n of nodes.values()) {
      const { x, y } = pos.get(n.id);
      const text = n.label.length > 27 ? `${n.label.slice(0, 26)}…` : n.label;
      const g = svg("g", { class: `node ${n.kind}`, "data-node": n.id, tabindex: "0", role: "button" },
        svg("rect", { x, y, width: BOX_W, height: BOX_H, rx: 5 }),
        svg("text", { x: x + 8, y: y + 18 }, `${n.kind === "schedule" ? "◷ " : n.kind === "dataset" ? "▤ " : "▶ "}${text}`),
        tooltip(`${n.kind} ${n.label}`));
      g.addEventListener("click", () => showNode(n));
      g.addEventListener("keydown", (e) => { if (e.key === "Enter") showNode(n); });
      chart.append(g);
    }
    $("graph").replaceChildren(chart);
  }

  function showNode(n) {
    const box = $("graph-details");
    const rows = [el("h3", {}, `${n.kind}: ${n.label}`)];
    if (n.kind === "schedule") {
      const s = n.data;
      rows.push(el("p", {}, `Trigger: ${s.triggerText || s.trigger.type}; ${s.enabled ? "enabled" : "disabled"}` +
        (s.program ? `; launches ${s.program}` : "")));
      const edit = button("Edit", "edit", () => scheduleForm(s));
      rows.push(el("p", {}, el("a", { href: schedulePath(s.tenant, s.name) }, "its JSON"), " ", edit));
    } else if (n.kind === "program") {
      const spec = programsSeen[n.label];
      const runs = runsSeen.filter((r) => r.program === n.label);
      rows.push(el("p", {}, spec ? `Registered: ${spec.kind}${spec.target ? ` ${spec.target}` : ""}` : "Not registered."));
      rows.push(el("p", {}, `${runs.length} run${runs.length === 1 ? "" : "s"} kept` +
        (runs.length ? `; the latest ${runs[0].status} at ${localTime(started(runs[0]))}` : "") + "."));
      rows.push(el("p", {}, el("a", { href: `${programPath(n.label)}/status` }, "its status"), " ",
        el("a", { href: `${programPath(n.label)}/runs` }, "its runs")));
    } else {
      rows.push(el("p", {}, `Watched by ${n.schedules.length} schedule${n.schedules.length === 1 ? "" : "s"}: ` +
        n.schedules.map((id) => id.replace(/^schedule:/, "")).join(", ")));
    }
    box.replaceChildren(...rows);
    box.hidden = false;
    box.dataset.node = n.id;
  }

  // --- the loop ------------------------------------------------------------------------------------

  async function refresh() {
    const mine = ++generation;
    clearTimeout(timer);
    const [schedules, jobs, runs, fires, sensors, messages] = await Promise.allSettled([
      loadSchedules(),
      loadJobs(),
      loadRuns(),
      loadFires(),
      loadSensors(),
      loadMessages(),
    ]);
    if (mine !== generation) return;
    if (fires.status === "fulfilled") drawFires(fires.value);
    else drawFiresError(fires.reason);
    const sections = [
      ["schedules", schedules, renderSchedules],
      ["jobs", jobs, renderJobs],
      ["runs", runs, renderRuns],
      ["sensors", sensors, renderSensors],
      ["messages-topics", messages, renderMessages],
    ];
    const errors = [];
    let denied = null;
    for (const [id, result, render] of sections) {
      const error = result.status === "rejected" ? result.reason : null;
      const refused = error !== null && [401, 403].includes(error.status);
      // what another token showed must not stay on screen; other failures keep the last answer
      $(id).closest("section").classList.toggle("stale", error !== null && !refused);
      if (error === null) {
        try {
          render(result.value);
        } catch (e) {
          errors.push(e); // an answer the page did not expect: say so rather than stop refreshing
        }
      } else if (refused) {
        denied = denied || error;
        fill(id, [], "Not authorized.");
      } else errors.push(error);
    }
    if (schedules.status === "fulfilled") drawGraph();
    showErrors(errors);
    if (denied) {
      askForToken(denied); // no point asking again with the same token: wait for the user
      return;
    }
    authOk();
    $("updated").textContent = `Updated ${localTime(Date.now()).slice(11)}, every ${REFRESH_MS / 1000} s`;
    timer = setTimeout(refresh, REFRESH_MS);
  }

  function tick() {
    for (const node of document.querySelectorAll(".rel[data-at]")) {
      node.textContent = relative(Number(node.dataset.at));
    }
  }

  function setTenant(value) {
    tenant = value.trim();
    const url = new URL(location.href);
    if (tenant) url.searchParams.set("tenant", tenant);
    else url.searchParams.delete("tenant");
    history.replaceState(null, "", url);
    for (const id of ["schedules", "jobs", "runs"]) fill(id, [], "Loading…");
    refresh();
  }

  let typing = null;
  $("tenant").value = tenant;
  $("tenant").addEventListener("input", (e) => {
    clearTimeout(typing);
    typing = setTimeout(() => setTenant(e.target.value), 300);
  });
  $("refresh").addEventListener("click", refresh);
  $("auth").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("token").value.trim();
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
    $("token").value = "";
    refresh();
  });
  $("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    refresh();
  });
  $("new-schedule").addEventListener("click", () => scheduleForm(null));
  $("new-program").addEventListener("click", programForm);
  $("timeline-period").addEventListener("change", drawTimeline);
  $("dialog-close").addEventListener("click", () => $("dialog").close());
  $("dialog-form").addEventListener("submit", (e) => {
    e.preventDefault();
    confirmDialog();
  });
  $("dialog-body").addEventListener("input", () => {
    clearTimeout(previewTimer);
    previewTimer = setTimeout(previewDialog, 300);
  });
  $("dialog").addEventListener("close", () => {
    dialogState = null;
    refresh();
  });
  setInterval(tick, 1000);
  refresh();
})();
