"""The commands of `dojo`, one module per group. Each module's `add_to(commands)` declares its
subcommands on the parser and sets the function that runs each (`args.run`); server/cli.py
builds the parser from them and dispatches. shared.py is what they have in common: reading a
`.dojo` file and reporting bad input with its position, the runner's options."""
