"""Communication: the byte-counting process group, dtbench's MPI process group and the
parameter server's wire protocol, below the strategies that use them."""
