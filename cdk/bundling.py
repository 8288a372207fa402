"""Packaging the Python dependencies for Lambda without Docker: `pip install --platform ... --only-binary`.

The dependencies layer is built from a staging folder holding requirements.txt and schemas/ (the code
reads its JSON Schemas from BROKERBENCH_SCHEMAS, see brokerbench/paths.py). With bundling on (the default
for `cdk deploy`) pip fetches manylinux wheels for the Lambda runtime into python/ on this machine; if
that is impossible the synthesis fails with the reason instead of falling back to Docker silently.
With `-c brokerbench:bundle=false` (the tests, offline synthesis) the staging folder is used as it is:
the template is the same, only the layer's contents differ.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsii
from aws_cdk import BundlingOptions, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from . import paths

# The oldest glibc of the Lambda runtime's OS: Python 3.12+ runs on Amazon Linux 2023 (glibc 2.34). Wheels
# for any older manylinux tag run there too; pip does not infer them from one --platform, so all are named.
GLIBC_MINOR = 34


def manylinux_platforms(glibc_minor: int = GLIBC_MINOR, arch: str = "x86_64") -> list[str]:
    legacy = ["manylinux1", "manylinux2010", "manylinux2014"]
    return [f"{tag}_{arch}" for tag in legacy] + [f"manylinux_2_{m}_{arch}" for m in range(5, glibc_minor + 1)]


def pip_command(requirements: Path, target: Path, python_version: str) -> list[str]:
    platforms = [arg for p in manylinux_platforms() for arg in ("--platform", p)]
    return [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
            "--requirement", str(requirements), "--target", str(target), "--only-binary=:all:",
            "--implementation", "cp", "--python-version", python_version, *platforms]


@jsii.implements(ILocalBundling)
class LocalPipBundling:
    """The layer built on this machine: dependencies into python/, the schemas beside them."""

    def __init__(self, source: Path, python_version: str) -> None:
        self.source = source
        self.python_version = python_version

    def try_bundle(self, output_dir: str, _options=None, **_keywords) -> bool:  # jsii passes the options positionally
        out = Path(output_dir)
        done = subprocess.run(pip_command(self.source / "requirements.txt", out / "python", self.python_version),
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError("packaging the Lambda dependencies failed (pip needs PyPI; for an offline synthesis "
                               f"pass -c brokerbench:bundle=false):\n{done.stderr[-3000:]}")
        shutil.copytree(self.source / "schemas", out / "schemas", dirs_exist_ok=True)
        return True


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or n.endswith((".pyc", ".so")) or n.endswith(".egg-info")
            or n == ".pytest_cache"}


_STAGING_ROOT: Path | None = None


def staging(name: str, entries: dict[str, Path]) -> Path:
    """A folder made of copies of `entries` (name in the folder -> file or folder in the repository), so an
    asset holds exactly these and nothing else of the checkout (.venv, node_modules). Its path changes per
    synthesis, its contents (and so the asset hash) only when the files do."""
    global _STAGING_ROOT
    if _STAGING_ROOT is None:
        _STAGING_ROOT = Path(tempfile.mkdtemp(prefix="brokerbench-cdk-"))
        # CDK copies (or bundles) an asset into the cloud assembly when the asset is constructed: the
        # staging folders are not needed after this process.
        atexit.register(shutil.rmtree, _STAGING_ROOT, True)
    folder = _STAGING_ROOT / name
    if folder.exists():
        return folder
    folder.mkdir(parents=True)
    for target, source in entries.items():
        if source.is_dir():
            shutil.copytree(source, folder / target, ignore=_ignore)
        else:
            shutil.copy2(source, folder / target)
    return folder


def dependencies_code(runtime: lambda_.Runtime, python_version: str, bundle: bool) -> lambda_.Code:
    source = staging("layer", {"requirements.txt": paths.REQUIREMENTS, "schemas": paths.SCHEMAS})
    if not bundle:
        return lambda_.Code.from_asset(str(source))
    return lambda_.Code.from_asset(str(source), bundling=BundlingOptions(
        image=runtime.bundling_image,  # only used if local bundling declined, which it never does (it raises)
        command=["bash", "-c", "pip install --no-cache-dir -r requirements.txt -t /asset-output/python "
                               "&& cp -r schemas /asset-output/"],
        local=LocalPipBundling(source, python_version),
    ))
