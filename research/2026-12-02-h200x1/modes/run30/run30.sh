#!/bin/bash
# one H200: unseen configs compiled, default profile
source .whl/common.sh
tr_ research/configs/llama-0.95b.json zero2 2 4096 --compile
tr_ research/configs/llama-2.46b-gqa.json zero3 1 4096 --compile
tr_ research/configs/llama-deep-narrow.json ddp 8 2048 --compile
tr_ research/configs/llama-vocab256k.json zero2 2 4096 --compile
tr_ research/configs/llama-wide-l8.json zero2 1 8192 --compile
tr_ llama3.2-3b ddp 2 2048 --compile
table
