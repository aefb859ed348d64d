"""The validation set: published measurements of vLLM serving (published.toml) and its tables."""
