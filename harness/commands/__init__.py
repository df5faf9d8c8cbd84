"""The command line: one module per subcommand, holding its arguments and a few lines of glue
into the feature package that does the work; `cli.py` dispatches and turns errors into exit
codes, `options.py` declares the option groups every command shares."""
