"""Lambda entry point of the hourly sweeper: deletes bb-* MSK clusters, ElastiCache groups, Amazon MQ brokers and EC2 workers tagged
with a run that has ended, and says what it deleted and what it left (brokerbench/workflow/sweep.py)."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import sweep


@lambda_entry(correlation_id_path=None)
def lambda_handler(event, context):
    swept = sweep.sweep_targets()
    for item in swept["deleted"]:
        logger.info("swept", kind=item["kind"], resource=item["name"], run_id=item["run_id"], state=item["outcome"])
    for item in swept["left"]:
        logger.info("left", kind=item["kind"], resource=item["name"], run_id=item["run_id"], reason=item["reason"])
    return swept
