"""Measurements on real GPUs (NCCL) or CPU (gloo). The only package that imports torch."""
