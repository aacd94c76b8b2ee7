"""Nodes: what knows several hosts and belongs to no one stage (torchrun's c10d rendezvous, the
node parameters users already have, the command each other node runs)."""
