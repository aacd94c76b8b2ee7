"""What the notebooks add in JupyterLab and never need headless: :mod:`.form`, a form per
stage made from its ``Params``."""
