"""What one rank process does: join the process group, bind its device, feed batches, train
through the spec's strategy (a throughput loop or a time-to-train loop), measure each step
and write its raw results for the supervisor."""
