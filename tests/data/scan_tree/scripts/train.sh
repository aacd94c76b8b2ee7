#!/usr/bin/env bash
# pip install flash-attn  (a comment: not a finding)
pip install flash-attn --no-build-isolation
export NCCL_SOCKET_IFNAME=eth0
CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc_per_node 2 train.py
pip install xformers && pip install flash-attn --no-build-isolation
