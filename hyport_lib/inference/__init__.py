"""Stage 03, ``03_inference``: the model answers one image prompt and a mixed batch on every
card, each card in a fresh worker process, and the cards must agree."""
