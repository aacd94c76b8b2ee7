"""The front end that runs every stage notebook through papermill into one offline report:
:mod:`.runner` (the run), :mod:`.index` and :mod:`.bundle` (its pages), :mod:`.blog` (the drafts)."""
