"""Where records are kept and read from: a directory store with its index, a PostgreSQL store,
the URL that names one, and the readers of record files and pytest-benchmark JSON."""
