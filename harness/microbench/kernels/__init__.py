"""Kernel microbenchmarks (docs/guide/kernels.md): GEMM, convolution by algorithm, the LSTM cell and
memory bandwidth, each placed on a roofline of the compute peak and bandwidth measured in the
same invocation. The layout follows the data: shapes -> sets -> kernels (conv_algorithms, fft,
winograd, gemm, lstm, memory) -> roofline -> runner -> records."""
