"""The AWS CDK app of brokerbench: `cdk deploy` stands up the whole service (see cdk/app.py)."""
