"""`dtbench publish`: the records as a static site of linked pages (machines, workloads, the
raw records) that opens from disk with no server and loads nothing from outside itself."""
