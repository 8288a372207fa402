"""Lambda entry point of the hourly sweeper: handles the RunEnded dead letters again, deletes bb-* MSK clusters,
ElastiCache groups, Amazon MQ brokers and EC2 workers tagged with a run that has ended (or is past its deadline), and
says what it deleted, what it left and what it could not list, read or delete (brokerbench/workflow/sweep.py). The
last are counted as SweepFailures, a metric the CDK app alarms on."""

from brokerbench.observability import count, lambda_entry, logger
from brokerbench.workflow import sweep


@lambda_entry(correlation_id_path=None)
def lambda_handler(event, context):
    swept = sweep.sweep_targets()
    for item in swept["drained"]:
        logger.info("dead letter handled", run_id=item["run_id"], status=item["status"], teardown=item["teardown"])
    for item in swept["deleted"]:
        logger.info("swept", kind=item["kind"], resource=item["name"], run_id=item["run_id"], state=item["outcome"])
    for item in swept["left"]:
        logger.info("left", kind=item["kind"], resource=item["name"], run_id=item["run_id"], reason=item["reason"])
    for item in swept["failed"]:
        logger.warning("sweep failure", action=item["action"], kind=item["kind"], resource=item["name"],
                       run_id=item["run_id"], reason=item["reason"])
    count("SweepFailures", len(swept["failed"]))
    return swept
