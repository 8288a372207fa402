"""No secret in the code: every file git tracks is scanned for what real credentials look like (AWS access key
ids and secret keys, private keys, GitHub and Slack tokens, a password or token given as a literal). Credentials
reach the code only at run time: Secrets Manager and IAM in AWS, an environment variable or a 0600 file locally."""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PATTERNS = {
    "AWS access key id": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    "AWS secret access key": re.compile(r"(?i)aws_secret_access_key\W{1,4}[A-Za-z0-9/+]{40}\b"),
    "private key": re.compile(r"-----BEGIN (RSA |EC |OPENSSH |DSA )?PRIVATE KEY-----"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36}\b"),
    "Slack token": re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}"),
    "literal password or token": re.compile(
        r"(?i)\b(password|passwd|auth_token|secret)[\"']?\s*[:=]\s*[\"'](?![{$<]|arn:)[^\"'\s]{12,}[\"']"),
}


def findings(path: Path) -> list[str]:
    try:
        text = path.read_text()
    except (UnicodeDecodeError, OSError):
        return []  # binary (the archived study runs are gzip)
    return [f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{text.count(chr(10), 0, m.start()) + 1}: "
            f"{kind}" for kind, pattern in PATTERNS.items() for m in pattern.finditer(text)]


def test_no_file_in_the_repository_holds_a_secret():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert len(tracked) > 100  # the scan read the repository
    found = [f for name in tracked if name != "tests/unit/test_no_secrets_in_code.py" for f in findings(REPO / name)]
    assert found == []


def test_the_scan_finds_what_a_secret_looks_like(tmp_path):
    planted = tmp_path / "settings.py"
    key = "AKIA" + "ABCDEFGHIJKLMNOP"  # split so that this file does not hold one whole
    planted.write_text(f'AWS_KEY = "{key}"\nREDIS = {{"password": "' + "s3cr3t-" + 'value-here"}\nok = "${TOKEN}"\n')
    assert [f.split(": ", 1)[1] for f in findings(planted)] == ["AWS access key id", "literal password or token"]
