"""Microbenchmarks below the training loop: the GEMM peak and copy bandwidth that MFU divides
by, collective timings in the manner of nccl-tests, and the kernel sets (GEMM, convolution
algorithms, LSTM cell, attention) on a roofline; one timing loop serves them all."""
