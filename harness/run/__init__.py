"""`dtbench run` from the plan to the stored record: suites and the plan, the preflight (what
this machine can run, IPEX and compile switched on, the peak), launching and watching the
ranks, collecting their measurements into metrics, writing the record; also the sbatch script
that runs a suite under Slurm."""
