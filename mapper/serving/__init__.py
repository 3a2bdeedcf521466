"""The serving planner: a request's prefill and decode steps with a KV cache, tensor and pipeline
parallel layouts for inference, chosen by a block-level model priced from the cost model
(:mod:`mapper.serving.search`)."""
