"""Tasks that fit no device: the exact engine's first check, with the reason."""

from __future__ import annotations

from mapper.costing.cost import CostTable
from mapper.engine.schedule import ScheduleOptions
from mapper.errors import InfeasibleError
from mapper.mapping.exact.formulation import is_fpga
from mapper.mapping.orders import allowed_devices


def check_feasible(cost: CostTable, options: ScheduleOptions) -> None:
    """Raise :class:`InfeasibleError` naming a task that fits no device, and why."""
    cost.require_feasible()  # names each device's reason (placement, memory, dtype, ...)
    for t in range(cost.n_tasks):
        name = cost.graph.tasks[t].name
        feas = allowed_devices(cost, t)
        if not feas:
            raise InfeasibleError(f"task {name!r} cannot run on any device of {cost.platform.name}", obj=name)
        if options.memory and not any(cost.footprint[t] <= cost.memory_capacity[d] for d in feas):
            raise InfeasibleError(
                f"task {name!r} needs {cost.footprint[t]:.6g} bytes, more than the memory of every device it can use",
                obj=name,
            )
        if options.area and not any(not is_fpga(cost, d) or cost.area[t][d] <= cost.area_capacity[d] for d in feas):
            raise InfeasibleError(f"task {name!r} does not fit the area of any FPGA it is restricted to", obj=name)
