"""The one definition of every exported metric: name, type, help, labels.

The exporter, the dashboards, the alert rules and the docs all read this table;
nothing else spells a metric name. Names follow the spec (shared/spec/metrics.md).
Read it as one namespace (`from warpwatch.export import metricdefs as md`; `md.GPU_BUSY`);
its modules hold the definitions by subject: `definition` (`MetricDef`, `exposed_name`),
`kernels`, `gpus`, `rounds` (the capture rounds), `agent` (the agent's own, `AGENT`), and
`exposition` (`ALL`: the window snapshot's, in the order a scrape exposes them).
"""

from .agent import *  # noqa: F403
from .definition import *  # noqa: F403
from .exposition import *  # noqa: F403
from .gpus import *  # noqa: F403
from .kernels import *  # noqa: F403
from .rounds import *  # noqa: F403
