"""`warpwatch.inprocess`, the documented in-process API: the code lives in `warpwatch.capture.inprocess`.

import warpwatch.inprocess
handle = warpwatch.inprocess.attach(period_s=60, window_s=2, trace_dir="/tmp/warpwatch")
"""

from .capture.inprocess import Attachment, TraceCallback, attach

__all__ = ["Attachment", "TraceCallback", "attach"]
