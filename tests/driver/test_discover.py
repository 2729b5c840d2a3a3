"""discover_node on small trees: GPU counts, MIG, device nodes, bad input, NVML merge."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import treebuilder
from nct.config.model in_place_marker import *  # noqa  (placeholder, replaced below)
