"""What the notebooks add in JupyterLab: a form per stage made from its ``Params``
(:mod:`.form`), the Stop button (:mod:`.stop`) and the comparison of recorded runs
(:mod:`.compare`, which ``hyport compare`` writes as a page)."""
