"""hyport: a workbook for porting Hugging Face (vision-)language models to Ascend NPUs.

The library holds all logic; notebooks in ``notebooks/`` and the ``hyport`` CLI are
thin clients. Importing this package is cheap: it imports neither torch nor
torch_npu.
"""

__version__ = "0.1.0"
