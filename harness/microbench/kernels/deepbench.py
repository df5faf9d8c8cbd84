"""A representative subset of DeepBench's training kernels (Baidu Research, DeepBench,
code/kernels/gemm_problems.h, conv_problems.h and rnn_problems.h, `training_set`; those lists
hold 160 GEMM, 94 convolution and 53 RNN shapes). The tuples below are data copied from those
lists, converted to this module's field order; the choice covers each list's regimes at a
size two CPU cores finish in seconds per kernel:

GEMM (m, n, k, a_t, b_t), 15 of 160: speech-RNN square-ish layers with small and large batch
1760x16x1760 NN, 1760x128x1760 NN, 1760x7000x1760 NN, 2048x32x2048 TN, 2560x64x2560 NN,
4096x128x4096 TN, 2560x7133x2560 NT; the large output-layer products 5124x9124x2048 NN and
512x24000x2048 TN; the thin 35x8457x2048 NN; the wide-batch 7680x64x2560 TN and 3072x128x1024
TN; the memory-bound 512x16x500000 NN; and the small 1024x700x512 NN and 512x32x512 NT.

Convolution (w, h, c, n, k, filter w, filter h, pad w, pad h, stride w, stride h), 8 of 94:
DeepSpeech's first layer 700x161 with a 20x5 filter at stride 2; the small-channel 3x3 speech
layer 480x48x1; face recognition 54x54x64 3x3; VGG 112x112x64 -> 128 3x3 (batch 8, below
NNPACK's minimum); GoogLeNet's 5x5 layers 28x28x192 -> 32 and 7x7x832 -> 128; ResNet's
14x14x256 3x3 and its strided 1x1 56x56x64 -> 256.

LSTM (hidden, batch), 3 of 53 RNN shapes, one cell step with input width = hidden:
512 x 16, 1024 x 32, 2048 x 64.
"""
from __future__ import annotations

from harness.microbench.kernels.shapes import ConvShape, GemmShape, LstmShape

GEMM = ((1760, 16, 1760, False, False), (1760, 128, 1760, False, False),
        (1760, 7000, 1760, False, False), (2048, 32, 2048, True, False),
        (2560, 64, 2560, False, False), (4096, 128, 4096, True, False),
        (2560, 7133, 2560, False, True), (5124, 9124, 2048, False, False),
        (512, 24000, 2048, True, False), (35, 8457, 2048, False, False),
        (7680, 64, 2560, True, False), (3072, 128, 1024, True, False),
        (512, 16, 500000, False, False), (1024, 700, 512, False, False),
        (512, 32, 512, False, True))

CONV = ((700, 161, 1, 16, 32, 20, 5, 0, 0, 2, 2), (480, 48, 1, 16, 16, 3, 3, 1, 1, 1, 1),
        (54, 54, 64, 8, 64, 3, 3, 1, 1, 1, 1), (112, 112, 64, 8, 128, 3, 3, 1, 1, 1, 1),
        (28, 28, 192, 16, 32, 5, 5, 2, 2, 1, 1), (7, 7, 832, 16, 128, 5, 5, 2, 2, 1, 1),
        (14, 14, 256, 16, 256, 3, 3, 1, 1, 1, 1), (56, 56, 64, 16, 256, 1, 1, 0, 0, 2, 2))

LSTM = ((512, 16), (1024, 32), (2048, 64))


def gemm_shapes() -> list[GemmShape]:
    return [GemmShape(*entry) for entry in GEMM]


def conv_shapes() -> list[ConvShape]:
    """DeepBench's (w, h, c, n, k, s, r, pad_w, pad_h, stride_w, stride_h) as ConvShape."""
    return [ConvShape(n=n, c=c, h=h, w=w, k=k, r=r, s=s, stride=(stride_h, stride_w),
                      padding=(pad_h, pad_w))
            for w, h, c, n, k, s, r, pad_w, pad_h, stride_w, stride_h in CONV]


def lstm_shapes() -> list[LstmShape]:
    return [LstmShape(batch=batch, input=hidden, hidden=hidden) for hidden, batch in LSTM]
