"""Split plans: data, tensor and pipeline parallelism as graph rewrites.

- :mod:`.plan`: :class:`~.plan.Plan`, the degrees and the device mesh;
- :mod:`.roles`: which ops the batch and tensor splits may cut;
- :mod:`.collectives`: the one collective model (all-reduce, all-gather, reduce-scatter, all-to-all,
  broadcast, send), for the task graphs and the plan models alike;
- :mod:`.rewrite`: the forward graph cut by a plan;
- :mod:`.gradients`: a split training step's gradient collectives;
- :mod:`.search`: ``--parallel auto|data|tensor|pipeline``: the plans tried and the one kept.
"""
