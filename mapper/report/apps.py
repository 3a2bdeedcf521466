"""The ``apps`` entry of the reports: each model of a workload (``apps.json``) with its latency,
whether it meets its SLO, and its misses (docs/platforms.md, Several models).

The schedule maps one request of every model, all released together. A model's ``latency`` is
its last task's end. Its processors' steady-state load is each device's busy time per period
summed over the models, ``U_d = sum_m busy(m, d) / period_m`` (the utilisation bound of periodic
scheduling, Liu and Layland, JACM 1973): past 1 the device cannot keep up and the requests of every
model on it queue without bound. ``misses`` counts the requests of one second that miss their
``slo_ms``: all of them when the latency exceeds it or a device the model uses is overloaded,
else none."""

from __future__ import annotations

import math

from mapper.engine.schedule import Schedule
from mapper.frontend.workload import App, app_tasks


def latencies(schedule: Schedule, apps: tuple[App, ...]) -> list[float]:
    """Each model's latency: its last task's end, all models released together."""
    return [max((schedule.slots[t].end for t in tasks), default=0.0)
            for tasks in app_tasks(schedule.cost.graph, apps)]


def device_loads(schedule: Schedule, apps: tuple[App, ...]) -> list[float]:
    """``U_d`` of every device (the module docstring)."""
    load = [0.0] * schedule.cost.n_devices
    for app, tasks in zip(apps, app_tasks(schedule.cost.graph, apps)):
        for t in tasks:
            sl = schedule.slots[t]
            load[sl.device] += (sl.end - sl.start) / app.period
    return load


def apps_json(schedule: Schedule, apps: tuple[App, ...]) -> dict:
    """``{"models": [{name, file, period_ms, slo_ms, latency, slo_met, misses}], "loads": {device: U}}``."""
    loads = device_loads(schedule, apps)
    models = []
    for app, tasks in zip(apps, app_tasks(schedule.cost.graph, apps)):
        latency = max((schedule.slots[t].end for t in tasks), default=0.0)
        overloaded = any(loads[schedule.slots[t].device] > 1.0 for t in tasks)
        requests = math.ceil(1.0 / app.period - 1e-9)
        misses = requests if overloaded or latency > app.slo * (1 + 1e-12) else 0
        slo = app.slo * 1e3 if math.isfinite(app.slo) else None  # a job without slo_ms
        models.append({"name": app.label, "file": app.file, "period_ms": app.period * 1e3,
                       "slo_ms": slo, "latency": latency, "slo_met": misses == 0, "misses": misses})
    devices = schedule.cost.platform.devices
    return {"models": models, "loads": {devices[d].name: u for d, u in enumerate(loads)}}


def sharing_table(sharing: dict) -> str:
    """The text view of a jobs file placed on slices (:func:`mapper.serving.sharing.sharing_json`)."""
    from mapper.core.terminal import escape_controls
    from mapper.core.units import fmt_time

    lines = [f"jobs on slices: largest slice load {sharing['load']:.3f} ({sharing['status']}, bound "
             f"{sharing['bound']:.3f}); every rate x{sharing['scale']:.2f} fits" if sharing["scale"] else
             "jobs on slices: no load"]
    lines.append(f"  {'job':<16} {'slice':<12} {'request':>10} {'rate /s':>10} {'max /s':>10} {'latency':>10}")
    for j in sharing["jobs"]:
        most = "-" if j["throughput"] is None else f"{j['throughput']:.1f}"
        lines.append(f"  {j['name']:<16} {j['slice']:<12} {fmt_time(j['request_s']):>10} {j['rate']:>10.1f} {most:>10} "
                     f"{fmt_time(j['latency']):>10}")
    for s in sharing["slices"]:
        lines.append(f"  slice {s['name']} ({s['kind']}): load {s['load']:.3f}")
    lines += [f"  note: {n}" for n in sharing["interference"]]
    return escape_controls("\n".join(lines) + "\n")
