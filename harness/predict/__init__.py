"""`dtbench predict`: a calibrated analytic model of distributed training
(docs/guide/prediction.md).

costs.py prices one collective with α-β formulas; network.py holds the α and β of each
collective (fitted from `dtbench comm` records by calibration.py, or given); workload.py the
facts of a workload and its calibrated compute time; the strategy models (dataparallel.py,
servers.py, modelparallel.py) turn the volumes of harness.strategies.volumes into a step
time; model.py runs, over node counts, the model each strategy's class names (step_model);
validate.py sets predictions beside measured runs; records.py writes the results as records
of task "prediction"; command.py is the body of the command (its options are in
harness/commands/predict.py).
"""
