"""The server side the harness drives: starting servers and reading what they report.

- `launcher`: start and stop the simulator, vLLM or llama.cpp as child processes (a new engine
  launcher goes here, with its argv builder) and wait until they serve;
- `llamacpp`: find llama-server and its GGUF model, build its argv;
- `scrape`: poll the target's Prometheus `/metrics` during a run.

server imports config and, to start the simulator, its presets; never the client or analysis.
"""
