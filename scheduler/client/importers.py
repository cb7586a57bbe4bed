"""From another scheduler's definitions to files `scheduler apply` takes: a crontab, Kubernetes CronJob
manifests. Each importer answers the document (`programs:` + `schedules:`) and a report: one line per
source entry, what it became and what of it could not be carried over (never silently dropped).

A crontab line's command and a CronJob's container become `command` programs run by the launcher on its
own host (`/bin/sh -c` for a crontab line, as cron does): an image, a user, MAILTO are reported, not
mapped. Names are stable across imports (a crontab schedule's name is its command's first word and a hash
of the command), so an edited file re-imported and applied updates rather than recreates."""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_ENV_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


@dataclass
class Imported:
    programs: dict[str, dict[str, Any]] = field(default_factory=dict)
    schedules: list[dict[str, Any]] = field(default_factory=list)
    report: list[str] = field(default_factory=list)  # "line 3: ... -> acme/backup-1a2b3c; not mapped: ..."
    skipped: int = 0  # entries that became nothing

    def document(self) -> dict[str, Any]:
        return {"programs": self.programs, "schedules": self.schedules}


def slug(text: str, limit: int = 40) -> str:
    """A name part from free text: lower case, [a-z0-9-], never empty."""
    out = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return out or "job"


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _cron_command(raw: str) -> tuple[str, str | None]:
    """A crontab command as the shell gets it: `\\%` is a `%`; an unescaped `%` ends the command (the
    rest is its standard input, which cannot be carried over)."""
    out, i = [], 0
    while i < len(raw):
        if raw[i] == "\\" and i + 1 < len(raw) and raw[i + 1] == "%":
            out.append("%")
            i += 2
            continue
        if raw[i] == "%":
            return "".join(out).strip(), raw[i + 1 :]
        out.append(raw[i])
        i += 1
    return "".join(out).strip(), None


def from_crontab(text: str, tenant: str, timezone: str = "UTC", system: bool = False) -> Imported:
    """A crontab (a user's, or with `system` /etc/crontab's and cron.d's, whose 6th field is a user)."""
    result = Imported()
    env: dict[str, str] = {}
    shell = "/bin/sh"
    names: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"line {number}"
        assignment = _ENV_LINE.match(stripped)
        words = stripped.split()
        if assignment:  # (a time field never begins with a letter: NAME=value sets the environment)
            name, value = assignment.group(1), _unquote(assignment.group(2))
            if name in ("CRON_TZ", "TZ"):
                timezone = value
                result.report.append(f"{where}: {name}={value}: the time zone of the lines after it")
            elif name == "MAILTO":
                result.report.append(f"{where}: MAILTO={value}: not mapped (no mail is sent; a run's "
                                     "output is in its run record)")  # fmt: skip
            elif name == "SHELL":
                shell = value
                result.report.append(f"{where}: SHELL={value}: the shell of the commands after it")
            else:
                env[name] = value
                result.report.append(f"{where}: {name}: in the environment of the commands after it")
            continue
        if words[0].startswith("@"):
            nickname, fields_count = words[0].lower(), 1
            if nickname == "@reboot":
                result.report.append(f"{where}: @reboot: not mapped (a scheduler has no boot of a host)")
                result.skipped += 1
                continue
            if nickname not in NICKNAMES:
                result.report.append(f"{where}: {words[0]}: not a cron nickname; not mapped")
                result.skipped += 1
                continue
            expression = NICKNAMES[nickname]
        else:
            fields_count = 5
            if len(words) < 6:
                result.report.append(f"{where}: not five time fields and a command; not mapped")
                result.skipped += 1
                continue
            expression = " ".join(words[:5])
        rest = stripped.split(None, fields_count + (1 if system else 0))
        if len(rest) <= fields_count + (1 if system else 0):
            result.report.append(f"{where}: no command; not mapped")
            result.skipped += 1
            continue
        notes = []
        if system:
            notes.append(f"user {rest[fields_count]}: runs as the launcher's user")
        command, stdin = _cron_command(rest[-1])
        if stdin is not None:
            notes.append("the text after an unescaped % (the command's standard input) is dropped")
        digest = hashlib.sha1(command.encode()).hexdigest()[:6]
        base = f"{slug(command.split()[0].rsplit('/', 1)[-1] if command else 'job', 30)}-{digest}"
        names[base] = names.get(base, 0) + 1
        name = base if names[base] == 1 else f"{base}-{names[base]}"
        program = f"{tenant}/crontab/command/{name}"
        spec: dict[str, Any] = {"kind": "command", "argv": [shell, "-c", command]}
        if env:
            spec["env"] = dict(env)
        spec["description"] = f"crontab {where}: {command}"[:1024]
        result.programs[program] = spec
        result.schedules.append(
            {
                "tenant": tenant,
                "name": name,
                "enabled": True,
                "program": program,
                "trigger": {"type": "cron", "expression": expression, "timezone": timezone},
                "catchUp": "SKIP",
                "description": f"from crontab {where}: {stripped}"[:1024],
                "labels": {"imported-from": "crontab"},
            }  # fmt: skip
        )
        result.report.append(
            f"{where}: {expression} ({timezone}) -> {tenant}/{name}"
            + (f"; {'; '.join(notes)}" if notes else "")
        )
    return result


_POLICIES = {"Allow": "ALLOW_ALL", "Forbid": "SKIP", "Replace": "CANCEL_OTHER"}


def from_cronjobs(docs: list[Any], tenant: str | None = None) -> Imported:
    """Kubernetes CronJob manifests (batch/v1; a `List` of them too); other kinds are reported, skipped.
    The tenant is `tenant`, else the manifest's namespace, else "default"."""
    result = Imported()
    items: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List":
            items += doc.get("items") or []
        elif doc is not None:
            items.append(doc)
    for item in items:
        if not isinstance(item, dict) or item.get("kind") != "CronJob":
            kind = item.get("kind") if isinstance(item, dict) else type(item).__name__
            result.report.append(f"{kind}: not a CronJob; not mapped")
            result.skipped += 1
            continue
        meta = item.get("metadata") or {}
        spec = item.get("spec") or {}
        name = str(meta.get("name") or "cronjob")
        where = f"CronJob {meta.get('namespace', 'default')}/{name}"
        owner = tenant or str(meta.get("namespace") or "default")
        notes: list[str] = []
        expression = str(spec.get("schedule") or "")
        zone = spec.get("timeZone") or "UTC"
        if expression.startswith(("TZ=", "CRON_TZ=")):
            prefix, _, expression = expression.partition(" ")
            zone = prefix.partition("=")[2]
        expression = NICKNAMES.get(expression.strip().lower(), expression.strip())
        job = ((spec.get("jobTemplate") or {}).get("spec")) or {}
        pod = ((job.get("template") or {}).get("spec")) or {}
        containers = pod.get("containers") or []
        if not expression or not containers:
            result.report.append(f"{where}: no schedule or no container; not mapped")
            result.skipped += 1
            continue
        container = containers[0]
        if len(containers) > 1:
            notes.append(f"only the first of its {len(containers)} containers ({container.get('name')})")
        argv = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
        if not argv:
            notes.append("no command: the image's entrypoint cannot be run outside it; argv is a placeholder")
            argv = ["false"]
        if container.get("image"):
            notes.append(f"image {container['image']}: runs on the launcher's host, not in the image")
        env: dict[str, str] = {}
        for variable in container.get("env") or []:
            if "value" in variable:
                env[str(variable["name"])] = str(variable["value"])
            else:
                notes.append(f"env {variable.get('name')}: from a secret or field reference; not mapped")
        program = f"{owner}/{slug(name)}/command/{slug(str(container.get('name') or 'main'))}"
        program_spec: dict[str, Any] = {"kind": "command", "argv": argv, "description": f"from {where}"}
        if env:
            program_spec["env"] = env
        schedule: dict[str, Any] = {
            "tenant": owner, "name": slug(name, 100), "program": program,
            "enabled": not bool(spec.get("suspend")),
            "trigger": {"type": "cron", "expression": expression, "timezone": zone},
            "overlap": _POLICIES.get(str(spec.get("concurrencyPolicy") or "Allow"), "ALLOW_ALL"),
            "description": f"from {where}",
        }  # fmt: skip
        deadline = spec.get("startingDeadlineSeconds")
        if deadline is not None:
            schedule["catchUp"] = "COALESCE"
            schedule["catchUpWindowMs"] = int(deadline) * 1000
        active = job.get("activeDeadlineSeconds")
        if active is not None:
            schedule["timeLimitMs"] = max(int(active) * 1000, 1000)
        backoff = job.get("backoffLimit")
        if backoff:  # (Kubernetes' default is 6 retries of the pod; only an explicit one is carried over)
            schedule["retry"] = {"maxAttempts": min(int(backoff) + 1, 10)}
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        kept = {k: v for k, v in labels.items() if _LABEL.match(k) and _LABEL.match(v)}
        if set(labels) - set(kept):
            notes.append(f"labels {sorted(set(labels) - set(kept))}: not valid label keys or values here")
        schedule["labels"] = {**dict(list(kept.items())[:15]), "imported-from": "cronjob"}
        for unmapped in ("successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
            if unmapped in spec:
                notes.append(f"{unmapped}: not mapped (run history: SCHEDULER_RUN_HISTORY_MAX)")
        result.programs[program] = program_spec
        result.schedules.append(schedule)
        result.report.append(
            f"{where}: {expression} ({zone}), {schedule['overlap']} -> {owner}/{schedule['name']}"
            + (f"; {'; '.join(notes)}" if notes else "")
        )
    return result


_APS_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # APScheduler's day_of_week 0-6


def _ms(value: Any) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def _aps_trigger(trigger: Any, notes: list[str]) -> dict[str, Any] | None:
    """An APScheduler 3.x trigger as ours (None: it cannot be: said in notes)."""
    kind = type(trigger).__name__
    if kind == "CronTrigger":
        fields = {f.name: str(f) for f in trigger.fields}
        if fields["year"] != "*" or fields["week"] != "*":
            notes.append(f"year={fields['year']} week={fields['week']}: no such cron fields here; not mapped")
            return None
        days = re.sub(r"\d+", lambda m: _APS_DAYS[int(m.group()) % 7], fields["day_of_week"])
        expression = " ".join(
            (fields["second"], fields["minute"], fields["hour"], fields["day"], fields["month"], days)
        )
        return {"type": "cron", "expression": expression, "timezone": str(trigger.timezone)}
    if kind == "IntervalTrigger":
        seconds = int(trigger.interval.total_seconds())
        for unit, size in (("DAYS", 86_400), ("HOURS", 3_600), ("MINUTES", 60), ("SECONDS", 1)):
            if seconds and seconds % size == 0:
                out = {"type": "frequency", "timeUnit": unit, "time": seconds // size}
                if trigger.start_date is not None:
                    out["start"] = _ms(trigger.start_date)
                return out
        notes.append(f"interval {trigger.interval}: not a whole number of seconds; not mapped")
        return None
    if kind == "DateTrigger":
        return {"type": "once", "at": _ms(trigger.run_date)}
    notes.append(f"{kind}: no such trigger here (cron, interval, date are); not mapped")
    return None


def from_apscheduler(states: list[dict[str, Any]], tenant: str) -> Imported:
    """APScheduler 3.x jobs (each the state its job store pickles: id, func, trigger, args, kwargs, …):
    each a `python` program (its function, `module:function`, called as `function(args)`) and a schedule."""
    result = Imported()
    for state in states:
        job_id = str(state.get("id"))
        where = f"job {job_id}"
        notes: list[str] = []
        trigger = _aps_trigger(state.get("trigger"), notes)
        func = state.get("func")
        if trigger is None or not isinstance(func, str) or ":" not in func:
            if not isinstance(func, str) or ":" not in func:
                notes.append(f"func {func!r}: not a module:function reference; not mapped")
            result.report.append(f"{where}: " + "; ".join(notes))
            result.skipped += 1
            continue
        name = slug(job_id, 100)
        program = f"{tenant}/apscheduler/python/{slug(func.replace(':', '.'), 100)}"
        result.programs[program] = {
            "kind": "python",
            "target": func,
            "description": f"from APScheduler: {func}",
        }
        schedule: dict[str, Any] = {"tenant": tenant, "name": name, "program": program, "enabled": True,
                                    "trigger": trigger, "description": f"from APScheduler {where} ({state.get('name')})"}  # fmt: skip
        if state.get("args") or state.get("kwargs"):
            kwargs = state.get("kwargs") or {}
            data = {str(k): str(v) for k, v in kwargs.items()}
            if data:
                schedule["data"] = data
            notes.append("called as function(args) with the job's arguments (its kwargs as strings), not "
                         f"function(*{state.get('args')!r}, **kwargs): adapt it")  # fmt: skip
        schedule["labels"] = {"imported-from": "apscheduler"}
        schedule["catchUp"] = "COALESCE" if state.get("coalesce", True) else "EACH"
        grace = state.get("misfire_grace_time")
        if grace is not None:
            schedule["catchUpWindowMs"] = int(grace * 1000)
        if state.get("max_instances", 1) == 1:
            schedule["overlap"] = "SKIP"  # (APScheduler skips a run while one is running)
        cron = state.get("trigger")
        for ours, theirs in (("notBefore", "start_date"), ("notAfter", "end_date")):
            value = getattr(cron, theirs, None)
            if value is not None and type(cron).__name__ == "CronTrigger":
                schedule[ours] = _ms(value)
        jitter = getattr(cron, "jitter", None)
        if jitter:
            schedule["jitterMs"] = int(jitter * 1000)
        if state.get("executor", "default") != "default":
            notes.append(f"executor {state['executor']}: runs in the launcher's Python")
        result.schedules.append(schedule)
        result.report.append(f"{where}: {trigger.get('expression') or trigger['type']} -> {tenant}/{name}"
                             + (f"; {'; '.join(notes)}" if notes else ""))  # fmt: skip
    return result


def apscheduler_states(url: str, table: str = "apscheduler_jobs") -> list[dict[str, Any]]:
    """The jobs of an APScheduler SQLAlchemy job store (`sqlite:///path` read with sqlite3; any other URL
    with SQLAlchemy, which such a store's users have). Unpickling needs apscheduler installed."""
    import pickle

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", table):
        raise ValueError(f"table {table!r}: not a table name")
    query = f"SELECT job_state FROM {table} ORDER BY next_run_time"  # noqa: S608 (a checked identifier)
    if url.startswith("sqlite:///"):
        import sqlite3

        with contextlib.closing(
            sqlite3.connect(f"file:{url.removeprefix('sqlite:///')}?mode=ro", uri=True)
        ) as db:
            rows = [r[0] for r in db.execute(query)]
    else:
        import sqlalchemy  # type: ignore[import-not-found]

        with sqlalchemy.create_engine(url).connect() as db:
            rows = [r[0] for r in db.execute(sqlalchemy.text(query))]
    return [pickle.loads(row) for row in rows]  # noqa: S301 (the user's own job store)
