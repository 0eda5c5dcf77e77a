"""A front that never serves (for test_front_kill: a broker stopped while it waits for
its fronts). Run as ``python -m broker.tests.front.hanging_front`` with a front's
arguments, which it ignores."""

import time

time.sleep(3600)
