"""The client: the only part that opens connections to the target or reads the run's clock.

- `sse`: the sans-I/O SSE splitter; `openai`: request bodies and chunk decoding;
- `engine`: executes a plan (scheduling, retries, records); `state`: its counters, stop control
  and outcome;
- `fasthttp`: the lean HTTP/1.1 client; the engine's aiohttp path is the other transport;
- `shard`: the one rule splitting a plan among N shards, running a shard, merging outcomes;
  `workers`: shards in processes; `raycluster`: shards as Ray actors;
- `adapt`, `retry`: what a target refuses, and when a failure is sent again;
- `check`: the network half of `harness check`.

client imports config, workload and record; never the server side, the simulator or analysis.
"""
