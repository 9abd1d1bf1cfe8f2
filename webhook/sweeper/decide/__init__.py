"""The sweeper's decision: from the current state of one job to the actions that converge it.

Each module names one kind of decision: `chain` (the phases a job goes through), `records`
(what is recorded on the job's workloads), `lifecycle/` (one module per lifecycle rule),
`owned` (the objects the job owns), `topology` (the stamp), `agreement` and `events`.
"""

from webhook.sweeper.decide.chain import decide
from webhook.sweeper.decide.owned import podgroup_spec
from webhook.sweeper.decide.records import Outcome, recorded_outcome, recorded_status

__all__ = ["Outcome", "decide", "podgroup_spec", "recorded_outcome", "recorded_status"]
