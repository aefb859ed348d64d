"""One module per subcommand. Each defines `register(subparsers)`, which adds its parser and
sets `func(args) -> int`. `harness.cli` lists them in COMMANDS."""
