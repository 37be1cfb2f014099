"""Subcommands of the `llmservice` CLI: each module exposes add_parser(subparsers) and run(args)."""
