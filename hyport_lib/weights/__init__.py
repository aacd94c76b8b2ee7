"""Stage 05, ``05_weights``: the saved weights are complete, finite, loadable, and the model
that was trained. Entry points: :mod:`.stage` (the contract, every check in order),
:mod:`.show` (rendering). See docs/weights.md.
"""
