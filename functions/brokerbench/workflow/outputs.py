"""Where a run's outputs go: report files (a folder or S3) and notifications (a file or SNS)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path


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


class S3Reports:
    def __init__(self, client, bucket: str, prefix: str = "reports") -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix.strip("/")

    def write(self, run_id: str, name: str, body: str) -> str:
        key = f"{self.prefix}/{run_id}/{name}"
        content_type = "application/json" if name.endswith(".json") else "text/plain"
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body.encode(), ContentType=content_type)
        return f"s3://{self.bucket}/{key}"

    def read(self, run_id: str, name: str) -> str | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{run_id}/{name}")
        except self.client.exceptions.NoSuchKey:
            return None
        return response["Body"].read().decode()


class SnsNotifier:
    def __init__(self, client, topic_arn: str) -> None:
        self.client, self.topic_arn = client, topic_arn

    def publish(self, run_id: str, subject: str, message: dict) -> str:
        response = self.client.publish(TopicArn=self.topic_arn, Subject=subject[:100],
                                       Message=json.dumps(message, indent=2))
        return response["MessageId"]


class FileNotifier:
    """Local stand-in for the SNS topic: one JSON line per notification beside the run's reports."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def publish(self, run_id: str, subject: str, message: dict) -> str:
        path = self.folder / run_id / "notifications.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps({"at": datetime.now(timezone.utc).isoformat(), "subject": subject,
                                "message": message}) + "\n")
        return str(path)
