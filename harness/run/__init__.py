"""`dtbench run` from the plan to the stored record: suites and the plan, settling what this
machine can run, launching and watching the ranks, collecting their measurements into metrics,
writing the record; also the sbatch script that runs a suite under Slurm."""
