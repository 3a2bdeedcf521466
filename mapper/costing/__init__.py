"""Costing: every task made ready and priced on every device.

- :mod:`.fusion`: GEMM epilogues and elementwise chains merged into fused tasks;
- :mod:`.training`: backward tasks, optimizer updates and stash edges (``--train``);
- :mod:`.cost`: the cost table (:func:`~.cost.build_cost_table`), routes, explicit costs, FPGA area;
- :mod:`.efficiency`: efficiency factors, the dtype whose rate applies, per-op table keys;
- :mod:`.work`: what a task moves and computes (working set, FLOPs, the GEMM view);
- :mod:`.latency`: the cache-aware roofline with Amdahl's serial part, per task and device.
"""
