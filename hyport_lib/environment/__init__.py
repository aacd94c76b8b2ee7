"""Stage 01, ``01_environment``: the host's facts (versions, cards, CANN, memory, ports) and
the judgement of each."""
