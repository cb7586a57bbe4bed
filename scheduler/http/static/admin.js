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

  const programPath = (id) => `/programs/${id.split("/").map(encodeURIComponent).join("/")}`;
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

  async function loadRuns() {
    const programs = Object.keys(await api("/programs"));
    const answers = await Promise.all(programs.map((p) => api(`${programPath(p)}/runs`)));
    return answers
      .flatMap((a) => a.runs)
      .filter((r) => ofTenant(r.schedule) || ofTenant(r.program))
      .sort((a, b) => started(b) - started(a))
      .slice(0, RUNS_SHOWN);
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
        el("td", { class: "name" }, s.name),
        el("td", { class: "trigger" }, s.triggerText || s.trigger.type),
        el("td", { class: "program" }, s.program || ""),
        el("td", { class: "enabled" }, s.finished ? "finished" : s.enabled ? "yes" : "no"),
        ...timeCells(next, s.finished ? "finished" : s.enabled ? "on events" : "disabled"),
      );
    });
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

  function renderRuns(runs) {
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
      );
    });
    fill("runs", rows, "No runs yet.");
    setCount("runs-count", runs.length);
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

  // --- the loop ------------------------------------------------------------------------------------

  async function refresh() {
    const mine = ++generation;
    clearTimeout(timer);
    const [schedules, jobs, runs] = await Promise.allSettled([loadSchedules(), loadJobs(), loadRuns()]);
    if (mine !== generation) return;
    const sections = [
      ["schedules", schedules, renderSchedules],
      ["jobs", jobs, renderJobs],
      ["runs", runs, renderRuns],
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
  setInterval(tick, 1000);
  refresh();
})();
