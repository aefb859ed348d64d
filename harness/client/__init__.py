"""The client: the only part that opens connections to the target or reads the run's clock.

- `sse`: the sans-I/O SSE splitter; `openai`: chunk decoding (`openai_body`: request bodies;
  `server_text`: the stream error and server text as kept; `tool_calls`: tool-call deltas);
- `engine`: executes a plan (open and closed loops, the drain); `request`: one request from its
  body to its Record (attempts, retries, the Record), the engine's base class; `state`: its
  counters, stop control and outcome;
- `transport`: the seam (the Transport protocol, one exception mapping); `transport_fast`
  (`fasthttp`, the lean HTTP/1.1 client's exchange, with `http1`, its sans-I/O response parser,
  and `fastpool`, its keep-alive connections) and `transport_aiohttp` behind it; `probe`: the
  unmeasured first request before a run;
- `shard`: the one rule splitting a plan among N shards, running a shard, merging outcomes;
  `workers`: shards in processes; `raycluster`: shards as Ray actors (`ray_clock`: their clocks against the driver's);
- `adapt`, `retry`: what a target refuses, and when a failure is sent again;
- `check`: the network half of `harness check` (`check_verdicts`: its verdicts, pure).

client imports config, workload and record; never the server side, the simulator or analysis.
"""
