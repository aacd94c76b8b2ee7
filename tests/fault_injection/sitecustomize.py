"""Python imports this module at start-up in every process whose PYTHONPATH holds this
folder: the processes a test starts through the ``fault_switches`` fixture. It arms the
test-only fault switches of :mod:`hyport_faults` (inert when none is set)."""

import hyport_faults

hyport_faults.install()
