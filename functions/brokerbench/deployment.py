"""What the CDK app deploys that the service's own code must agree with: the cell workers' sizes.

The app (cdk/constructs/functions.py, cdk/constructs/workers.py) builds the workers from these values and
the cost estimate (brokerbench/cost.py) prices them, so the two cannot drift apart.
"""

# The RunCell Lambda function: memory buys vCPUs (1,769 MB = 1 vCPU); a cell runs its producers,
# consumers and parent as processes. x86_64: the dependency layer's wheels are built for it.
WORKER_LAMBDA_MEMORY_MB = 4096
WORKER_LAMBDA_ARCHITECTURE = "x86_64"
# The EC2 worker's launch template: 8 vCPUs, for the cells Lambda cannot take (> 4 processes, or long).
EC2_WORKER_INSTANCE_TYPE = "c7i.2xlarge"
