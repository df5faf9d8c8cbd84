"""What dtbench knows before it measures anything, declared once: the metric catalogue (each
metric's unit, direction, scale, heading; metrics.py) and the arithmetic of the scales it
declares (units.py), the vendors' published peaks (datasheets.py), and the bytes a collective
puts on the wire under each algorithm (traffic.py). Pure data and formulas: no run, no
record, no I/O."""
