"""Where a run's outputs go: report files (a folder or S3) and notifications (a file or SNS)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from ..observability import logger


class FolderReports:
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def write(self, run_id: str, name: str, body: str) -> str:
        path = self.folder / run_id / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        return str(path)

    def read(self, run_id: str, name: str) -> str | None:
        path = self.folder / run_id / name
        return path.read_text() if path.is_file() else None

    def put_items(self, run_id: str, name: str, items: list) -> None:
        """Locally a map's items stay in the state (the local interpreter has no size limit): nothing to put."""
        return None


class S3Reports:
    """Report files under s3://BUCKET/PREFIX/<run id>/.

    A file that is not there reads as None ("not published": the API then builds the report from the run's
    events). S3 answers NoSuchKey only to a reader that may list the bucket (the CDK app grants s3:ListBucket
    under the prefix); to one that may not, it answers AccessDenied for a missing key, so AccessDenied reads as
    not published too, with a warning: the report is still built from the events, never lost."""

    NOT_PUBLISHED = ("NoSuchKey", "AccessDenied")

    def __init__(self, client, bucket: str, prefix: str = "reports") -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix.strip("/")

    def write(self, run_id: str, name: str, body: str) -> str:
        key = f"{self.prefix}/{run_id}/{name}"
        content_type = "application/json" if name.endswith(".json") else "text/plain"
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body.encode(), ContentType=content_type)
        return f"s3://{self.bucket}/{key}"

    def put_items(self, run_id: str, name: str, items: list) -> dict:
        """A JSON array for a Distributed Map's ItemReader (s3:getObject, InputType JSON): where it is."""
        key = f"{self.prefix}/{run_id}/{name}"
        self.client.put_object(Bucket=self.bucket, Key=key, Body=json.dumps(items, separators=(",", ":")).encode(),
                               ContentType="application/json")
        return {"Bucket": self.bucket, "Key": key}

    def read(self, run_id: str, name: str) -> str | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{run_id}/{name}")
        except self.client.exceptions.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code not in self.NOT_PUBLISHED:
                raise
            if code == "AccessDenied":
                logger.warning("report file not readable: read as not published",
                               extra={"run_id": run_id, "file": name, "bucket": self.bucket})
            return None
        return response["Body"].read().decode()


SNS_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:")
SUBJECT_LIMIT = 100  # SNS: at most 100 characters, printable ASCII, no line breaks


def sns_subject(subject: str) -> str:
    plain = "".join(c if " " <= c <= "~" else " " for c in " ".join(subject.split()))
    return plain[:SUBJECT_LIMIT]


class SnsNotifier:
    """Publishes to the service's topic, and also to each recipient that is a topic of its own.

    The recipients travel in the message and in the `recipients` message attribute (String.Array), so
    an email subscription of the service's topic with a filter policy on it gets only its own runs.
    """

    def __init__(self, client, topic_arn: str) -> None:
        self.client, self.topic_arn = client, topic_arn

    def publish(self, run_id: str, subject: str, message: dict, to: Sequence[str] = ()) -> str:
        to = list(to)
        kwargs = {"Subject": sns_subject(subject), "Message": json.dumps({**message, "recipients": to}, indent=2)}
        if to:
            kwargs["MessageAttributes"] = {"recipients": {"DataType": "String.Array", "StringValue": json.dumps(to)}}
        response = self.client.publish(TopicArn=self.topic_arn, **kwargs)
        failed = []
        for topic in dict.fromkeys(r for r in to if SNS_TOPIC_ARN.match(r) and r != self.topic_arn):
            try:  # one unreachable recipient must not keep the others from hearing about the run
                self.client.publish(TopicArn=topic, **kwargs)
            except Exception as exc:  # noqa: BLE001 (reported below, with the topic it concerns)
                failed.append(f"{topic}: {exc}")
        if failed:
            raise RuntimeError("could not publish to " + "; ".join(failed))
        return response["MessageId"]


class FileNotifier:
    """Local stand-in for the SNS topic: one JSON line per notification beside the run's reports."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def publish(self, run_id: str, subject: str, message: dict, to: Sequence[str] = ()) -> str:
        path = self.folder / run_id / "notifications.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps({"at": datetime.now(timezone.utc).isoformat(), "subject": subject, "to": list(to),
                                "message": message}) + "\n")
        return str(path)
