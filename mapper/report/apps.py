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
from mapper.frontend.workload import App


def _of(schedule: Schedule, app: App) -> list[int]:
    prefix = app.label + "."
    return [t.index for t in schedule.cost.graph.tasks if t.name.startswith(prefix)]


def device_loads(schedule: Schedule, apps: tuple[App, ...]) -> list[float]:
    """``U_d`` of every device (the module docstring)."""
    load = [0.0] * schedule.cost.n_devices
    for app in apps:
        for t in _of(schedule, app):
            sl = schedule.slots[t]
            load[sl.device] += (sl.end - sl.start) / app.period
    return load


def apps_json(schedule: Schedule, apps: tuple[App, ...]) -> dict:
    """``{"models": [{name, file, period_ms, slo_ms, latency, slo_met, misses}], "loads": {device: U}}``."""
    loads = device_loads(schedule, apps)
    models = []
    for app in apps:
        tasks = _of(schedule, app)
        latency = max((schedule.slots[t].end for t in tasks), default=0.0)
        overloaded = any(loads[schedule.slots[t].device] > 1.0 for t in tasks)
        requests = math.ceil(1.0 / app.period - 1e-9)
        misses = requests if overloaded or latency > app.slo * (1 + 1e-12) else 0
        models.append({"name": app.label, "file": app.file, "period_ms": app.period * 1e3,
                       "slo_ms": app.slo * 1e3, "latency": latency, "slo_met": misses == 0, "misses": misses})
    devices = schedule.cost.platform.devices
    return {"models": models, "loads": {devices[d].name: u for d, u in enumerate(loads)}}
