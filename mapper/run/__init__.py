"""Running a schedule: Numba kernels on the CPU or Dask workers, and calibration.

- :mod:`.execute`: passes over the schedule, thread lanes per device; :mod:`.trace` records them;
- :mod:`.dask_engine`: the same on Dask distributed (the one Dask import);
- :mod:`.synthetic`: inputs and weights; :mod:`.heap`: the allocator policy while timing;
- :mod:`.calibrate` with :mod:`.calibration`: ``mapper calibrate``; :mod:`.calibrated_run` and
  :mod:`.recost`: a run re-priced on a calibrated platform.
"""
