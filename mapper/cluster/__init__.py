"""The cluster planner: data, tensor and pipeline layouts for training on many nodes, chosen by
a layer-level model priced from the cost model (:mod:`mapper.cluster.search`)."""
