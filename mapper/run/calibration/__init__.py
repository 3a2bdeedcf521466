"""The parts of ``mapper calibrate`` (:mod:`mapper.run.calibrate` runs them in order).

- :mod:`.records`: settings and what was measured;
- :mod:`.machine`: rates of the machine itself (matmul, bandwidth, cache, launch);
- :mod:`.probes`: probe tasks per op class, timed and predicted;
- :mod:`.fits`: efficiencies, fixed times and the GEMM shape model fitted to the probes;
- :mod:`.writer`: the platform file and the platform it describes.
"""
