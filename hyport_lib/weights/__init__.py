"""Stage 05, ``05_weights``: the saved weights are complete, finite, loadable, and the model
that was trained (the contract: :mod:`.stage`; docs/weights.md)."""
