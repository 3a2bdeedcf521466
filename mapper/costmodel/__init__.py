"""The device-latency model behind :func:`mapper.cost.build_cost_table`.

- :mod:`.efficiency`: efficiency factors, the dtype whose rate applies, per-op table keys;
- :mod:`.work`: what a task moves and computes (working set, FLOPs, the GEMM view);
- :mod:`.latency`: the cache-aware roofline with Amdahl's serial part, per task and device.
"""
