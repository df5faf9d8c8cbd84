"""`dtbench predict`: a calibrated analytic model of distributed training
(docs/guide/prediction.md).

costs.py prices one collective with α-β formulas; network.py holds the α and β of each
collective (fitted from `dtbench comm` records by calibration.py, or given); context.py the
facts of a workload and its calibrated compute time; the strategy models (dataparallel.py,
servers.py, modelparallel.py) turn a strategy's collectives into a step time and report the
bytes its class's traffic() gives; scaleout.py runs, over node counts, the model each
strategy's class names (step_model); uncertain.py and interval.py give every prediction its
90% interval from its inputs' uncertainty, ranking.py orders strategies with the probability
that the order holds; validate.py sets predictions beside measured runs, published.py and
published_report.py beside published results; records.py writes the results as records of
task "prediction"; command.py is the body of the command (its options are in
harness/commands/predict.py).
"""
