"""mapper: a task-graph mapping compiler for heterogeneous CPU/GPU/FPGA systems."""

__version__ = "0.1.0"
