"""What a machine is: its hardware read from procfs, sysfs and lscpu (hardware.py, below the
backends, which read CPU flags from it), its microarchitecture, label and system description
(names.py), how busy it was while a run measured (load.py), and the fingerprint a record
carries (fingerprint.py, above the backends it asks)."""
