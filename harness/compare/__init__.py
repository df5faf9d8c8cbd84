"""`dtbench compare` and `dtbench history`: records matched by experiment, the difference
between a baseline and a candidate tested against the runs' spread (or a history's), the
verdict that gates CI, loss trajectories compared step by step, and a metric's series over
commits with its change points."""
