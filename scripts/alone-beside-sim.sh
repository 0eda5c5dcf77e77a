#!/usr/bin/env bash
# `make unit`'s second step: the tests marked `alone`, beside the Raft simulator.
#
# Those tests compare rates measured one after the other (a drain after a failover
# against the same drain without one), so nothing whose load changes may run beside
# them. The simulator's seeds from SIM_START on (the pytest chunks of
# controller/tests/raft/test_sim.py run the seeds below it) are a load that does not
# change: one process, one core, pure computation, from the first rate to the last.
# So they run here, on the core the tests leave idle, for as long as the tests run;
# then the simulator is stopped by its pid and reports the seeds it finished. A seed
# that fails fails this step with the command that replays it.
#
# Run through `uv run` (the Makefile does): `python` is the virtualenv's.
# Arguments go to pytest.
set -uo pipefail

sim_start=${SIM_START:-800}
python -m rocketcluster.controller.raft.sim --start "$sim_start" --steps 600 \
  --liveness-ticks 400 --until-stopped &
sim=$!

python -m pytest -m alone "$@"
tests=$?
[ "$tests" -eq 5 ] && tests=0  # 5: no test selected

kill -TERM "$sim" 2>/dev/null
wait "$sim"
simulated=$?
if [ "$simulated" -ne 0 ]; then
  echo "the Raft simulator beside the alone tests failed (exit $simulated): see FAIL above"
fi
[ "$tests" -ne 0 ] && exit "$tests"
exit "$simulated"
