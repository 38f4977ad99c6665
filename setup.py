"""The package list, found rather than kept by hand (pyproject.toml holds everything else).

One import name: ``context_engine/`` plus the top-level folders ``proxy/``, ``rules/`` and
``bench/``, which install as ``context_engine.proxy``, ``context_engine.rules`` and
``context_engine.bench`` with every package below them, so a new sub-package cannot be left out
of the wheel."""

from setuptools import find_packages, setup

FOLDERS = ("proxy", "rules", "bench")

package_dir = {"context_engine": "context_engine"}
packages = ["context_engine"]
for folder in FOLDERS:
    package_dir[f"context_engine.{folder}"] = folder
    packages += [f"context_engine.{folder}"]
    packages += [f"context_engine.{folder}.{name}" for name in find_packages(folder)]

setup(packages=packages, package_dir=package_dir)
