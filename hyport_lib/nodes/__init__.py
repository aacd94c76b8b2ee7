"""What knows several hosts and belongs to no one stage: the node parameters users already have
(inputs), this machine's names and addresses, the handshake of a multi-node job through
torchrun's rendezvous store, its heartbeats, the versions each node compares, and the command
that starts another node (docs/nodes.md)."""
