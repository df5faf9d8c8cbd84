"""The run declaration: what a run is before anything measures it. The frozen specs and their
choices (specs.py: RunSpec, LaunchOptions, CommSpec), a run field declared once and the
surfaces it reaches, flag, suite key, identity, store column, heading (fields.py: RunField,
declare()), the kinds of record with their identity fields, key and label (kinds.py), and what
a table column calls a spec field (headings.py)."""
