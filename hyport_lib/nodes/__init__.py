"""What knows several hosts and belongs to no one stage: the handshake of a multi-node job
through torchrun's rendezvous store, its heartbeats, the versions each node compares, and the
command that starts another node (docs/nodes.md)."""
