"""(being written)"""
from __future__ import annotations

from dynashape.records import OpLibrary

lib = OpLibrary()
