"""What a record is: the JSON Schema and its validation, `Metric` and the record's fields,
metric definitions, provenance (code, commit, tree), the experiment a record belongs to and
the summary row built from it."""
