"""A SAC agent whose process is killed with SIGKILL in the middle of a chosen update, once.

The kill is the kind a user meets (``kill -9``, the OOM killer): nothing in the process runs after
it, so the update's task run stays Running on the server and the log lines not yet sent to Prefect
are only in the session's ``log.txt``. The update first runs a few seconds (a stage in progress:
Prefect has heard that it started), then logs :data:`LAST_LINE` and is killed at once. A marker
file makes it happen only the first time. Used as ``params=tests.flows.killed`` by the retry tests.
"""

from __future__ import annotations

import logging
import os
import signal
import time

from tests.flows import faulty
from tests.flows.faulty import FailOnceSAC

cpanel = dict(faulty.cpanel)  # "fail_at_update": the update killed; "marker": the file saying it was
LAST_LINE = "update {}: the process is killed with SIGKILL now"
log = logging.getLogger("digideep.tests.killed")  # under "digideep": sent to Prefect as the Runner's lines


def gen_params(cpanel: dict) -> dict:
    params = faulty.gen_params(cpanel)
    params["agents"]["agent"]["type"] = "tests.flows.killed.KilledOnceSAC"
    return params


class KilledOnceSAC(FailOnceSAC):
    """:class:`~tests.flows.faulty.FailOnceSAC` whose fault is a SIGKILL of its own process."""

    def fault(self) -> None:
        time.sleep(3)  # the update runs a while: its task run's start and earlier lines reach Prefect
        log.info(LAST_LINE.format(self.update_calls))
        os.kill(os.getpid(), signal.SIGKILL)
