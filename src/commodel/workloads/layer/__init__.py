"""One transformer layer on one GPU: its kernels, the bytes its memory-bound kernels move, its compute
time and the overlap windows it offers, shared by training and serving."""
