"""`dtbench doctor`'s body: the node's checks and their verdicts (checks.py), every GPU of the
node at once (gpus.py), the node's run and record (node.py), and many nodes side by side
(fleet.py); harness/commands/doctor.py holds its options."""
