"""Utilities every layer uses and that know nothing of runs or metrics: errors and their exit
codes (errors.py), the named registries (registry.py), atomic files and checked output paths
(files.py), signals as one interrupt (interrupts.py), text made safe for where it is written
(outputs.py) and passwords kept out of it (secrets.py), the statistics of samples (stats.py),
text for people (text.py)."""
